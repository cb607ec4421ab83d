"""Slot-seconds thrown away per job by a database outage longer than the node timeout.

Long jobs train on their nodes, PostgreSQL stops for `--outage` seconds, comes back, and
every job is run to its end. Thrown away is what goodput (core/goodput.py, per attempt) counts as
recomputed (steps computed again after a resume, in slot-seconds) plus what a restart cost
besides: the lost attempt's tail after its last report and the next attempt's start-up.

    python -m bench.outage_waste --jobs 3 --outage 22

Two runs side by side, each on a fresh fleet (PostgreSQL + Redis of its own, one worker node
per job, one slot each, heartbeats every 3 s, a node timeout of 9 s): "after", today's
scheduler; "before", the same scheduler with the liveness rule of before the fix: the reaper
counts every node's silence from its last heartbeat, the outage included (it is handed no
`watched_since`, as the reaper had none then). Only the bench's own scheduler process
differs; the rule is not a setting of the platform.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from ampfleet.core import goodput
from ampfleet.core.models import Job
from tests.support.factories import job_spec
from tests.support.fleet import TERMINAL, Fleet, running_fleet, transitions
from tests.support.private_services import private_postgres, private_redis

HEARTBEAT_S = 3
NODE_TIMEOUT_S = 9


@dataclass
class Waste:
    job_id: str
    state: str
    attempts: int
    restarts: list[str]
    recomputed_slot_s: float
    restart_slot_s: float
    allocated_slot_s: float

    @property
    def thrown_away_slot_s(self) -> float:
        return self.recomputed_slot_s + self.restart_slot_s


def scheduler_with_the_old_rule() -> None:
    """`ampfleet scheduler` whose reaper is never told when the scheduler regained the
    database: a node's silence during the outage counts, as it did before the fix."""
    from ampfleet.cli import servers as cli
    from ampfleet.core.settings import Settings
    from ampfleet.scheduler import loop, reaper

    def reap_counting_all_silence(
        session: Session,
        settings: Settings,
        now: datetime,
        watched_since: datetime | None = None,  # noqa: ARG001 (the old reaper had none)
    ) -> int:
        return reaper.reap(session, settings, now, None)

    loop.reap = reap_counting_all_silence  # type: ignore[attr-defined]  # what a pass calls
    cli.scheduler()


def start_scheduler(fleet: Fleet, old_rule: bool) -> None:
    """The fleet's one scheduler, through this module either way, so both runs start it
    alike; stopped and logged with the fleet's other processes."""
    log = (fleet.root / "scheduler.log").open("ab")
    command = [sys.executable, "-m", "bench.outage_waste", "--scheduler"]
    fleet.processes["scheduler"] = subprocess.Popen(
        [*command, "old" if old_rule else "today"],
        env=fleet.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=Path.cwd(),
    )


def waste_of(database_url: str, fleet: Fleet, job_id: str) -> Waste:
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            job = session.get(Job, job_id)
            assert job is not None
            attempts = goodput.of_attempts(session, job)
    finally:
        engine.dispose()
    numbers = sorted(attempts)
    recomputed = sum(a.recomputed_slot_s for a in attempts.values())
    # A restart's own cost: the tail of every attempt but the last (after its last report,
    # until its slots were given up or the next attempt placed), and the start-up of every
    # attempt but the first.
    tails = sum(attempts[n].other_slot_s for n in numbers[:-1])
    startups = sum(attempts[n].startup_slot_s for n in numbers[1:])
    restarts = [reason for _, to, reason in transitions(fleet, job_id) if to == "RESTARTING"]
    return Waste(
        job_id=job_id,
        state=fleet.job(job_id)["state"],
        attempts=len(numbers),
        restarts=restarts,
        recomputed_slot_s=recomputed,
        restart_slot_s=tails + startups,
        allocated_slot_s=sum(a.allocated_slot_s for a in attempts.values()),
    )


def scenario(label: str, args: argparse.Namespace, old_rule: bool) -> list[Waste]:
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        postgres = stack.enter_context(private_postgres())
        redis = stack.enter_context(private_redis(tmp))
        nodes = tuple(f"node-{chr(ord('a') + i)}" for i in range(args.jobs))
        fleet = stack.enter_context(
            running_fleet(
                tmp / "fleet",
                database_url=postgres.url,
                broker_url=redis.url,
                nodes=nodes,
                cpu_slots=1,
                start_schedulers=0,
                extra_env={
                    "AMPFLEET_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
                    "AMPFLEET_NODE_TIMEOUT_S": str(NODE_TIMEOUT_S),
                },
            )
        )
        start_scheduler(fleet, old_rule)
        spec = job_spec(
            resources={"procs": 1},
            stop={"max_steps": args.steps},
            checkpoint={"every_steps": args.checkpoint_every},
            log_every_steps=20,
            retry={"max_restarts": 5},
        )
        jobs = [fleet.submit(spec)["id"] for _ in range(args.jobs)]

        def all_training() -> bool:
            return all(fleet.job(j)["progress"]["step"] >= args.checkpoint_every for j in jobs)

        fleet.wait_until(all_training, timeout=600, what="every job past its first checkpoint")
        running = sum(fleet.job(j)["state"] == "RUNNING" for j in jobs)
        print(f"{label}: {running} of {len(jobs)} jobs RUNNING as PostgreSQL stops", flush=True)
        postgres.stop()
        time.sleep(args.outage)
        postgres.start()
        for job_id in jobs:
            fleet.wait_for_state(job_id, TERMINAL, timeout=1800)
        wastes = [waste_of(postgres.url, fleet, j) for j in jobs]
    for w in wastes:
        print(
            f"{label}: {w.job_id} {w.state}, {w.attempts} attempt(s), restarts "
            f"{w.restarts or 'none'}: thrown away {w.thrown_away_slot_s:.1f} slot-s "
            f"(recomputed {w.recomputed_slot_s:.1f}, restart {w.restart_slot_s:.1f}) of "
            f"{w.allocated_slot_s:.1f} held",
            flush=True,
        )
    return wastes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--outage", type=float, default=22.0, help="seconds PostgreSQL is down")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--scheduler", choices=("old", "today"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scheduler == "old":
        scheduler_with_the_old_rule()
        return
    if args.scheduler == "today":
        from ampfleet.cli import servers as cli

        cli.scheduler()
        return
    results = {
        "after": scenario("after", args, old_rule=False),
        "before": scenario("before (the old liveness rule)", args, old_rule=True),
    }
    for label, wastes in results.items():
        thrown = [w.thrown_away_slot_s for w in wastes]
        restarts = sum(len(w.restarts) for w in wastes)
        print(
            f"{label}: median thrown away {statistics.median(thrown):.1f} slot-s per job "
            f"(range {min(thrown):.1f}-{max(thrown):.1f}), restarts {restarts} in "
            f"{len(wastes)} jobs (the outage is the only fault), all "
            f"{'SUCCEEDED' if all(w.state == 'SUCCEEDED' for w in wastes) else 'NOT all SUCCEEDED'}"
        )


if __name__ == "__main__":
    main()
