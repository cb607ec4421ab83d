"""Soak under mixed faults: 24 jobs on three worker nodes, PostgreSQL + Redis, while a
seeded schedule kills workers (SIGKILL, then a new worker), the scheduler and the API, stops
PostgreSQL for about 20 s (longer than the node timeout) and loses Redis (restarted empty),
and the test cancels a few jobs at random moments. (Long tier.)

Counted, as the worker-kill soak counts: every job ends SUCCEEDED, or CANCELLED exactly
when the test cancelled it; none stuck in a non-final state after the faults stop; no
metric point or log line lost or stored twice; no two attempts of one job training at
once; no node holding more slots than it has. And every restart with its cause: the job
event's reason, put down to the injected fault that explains it (tests/faults/causes.py).
The database outage may restart nothing: silence counts only while the scheduler can
reach the database (core/fleet.py, `silent_before`).

The jobs the test cancels are ones that could not end by themselves within the soak (many
steps), so CANCELLED is the only right end for them and a cancel cannot race a success.
The faults are kept apart in time, each window wide enough for what it may cause to show,
so a restart is put down to one fault; the outage has quiet on both sides."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select

from ampfleet.core.models import Allocation, Job, JobEvent
from ampfleet.core.states import SLOT_HOLDING_STATES
from tests.faults.causes import Fault, Restart, by_cause, describe
from tests.faults.overlap import (
    attempts_that_trained_at_once,
    held_after_the_next_attempt,
    nodes_over_their_slots,
)
from tests.faults.reported import count_reported
from tests.support.factories import job_spec
from tests.support.fleet import TERMINAL, Fleet
from tests.support.private_services import (
    PrivatePostgres,
    PrivateRedis,
    private_postgres,
    private_redis,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SEED = int(os.environ.get("AMPFLEET_SOAK_SEED", "24"))
NODES = ("node-a", "node-b", "node-c")
SLOTS = 1
JOBS = 24
CANCELLED = 3
HEARTBEAT_S = 2.0
NODE_TIMEOUT_S = 8.0
START_TIMEOUT_S = 30.0
OUTAGE_S = 20.0
SLACK_S = 20.0
"""How late after its window a fault's effect may still show on a loaded machine."""
QUIET_S = START_TIMEOUT_S + SLACK_S + 5
"""Kept around the database outage, so that nothing another fault causes falls inside
the window in which a restart is put down to the outage."""
STUCK_S = 60.0
DRAIN_S = 25 * 60
"""After the faults stop, how long the jobs may take to end (a bound, not a target)."""


@dataclass
class Cancels:
    """The jobs the test cancels, each at its moment (seconds into the schedule); a cancel
    the API could not take then (it was down, the database was) is tried again."""

    due: dict[str, float]
    accepted: set[str] = field(default_factory=set)
    tries: Counter[str] = field(default_factory=Counter)

    def send_due(self, fleet: Fleet, elapsed: float) -> None:
        for job_id, moment in self.due.items():
            if job_id in self.accepted or moment > elapsed or self.tries[job_id] >= 200:
                continue
            self.tries[job_id] += 1
            try:
                answer = fleet.http.post(f"/v1/jobs/{job_id}/cancel", timeout=10)
            except httpx.HTTPError:
                continue  # the API is down or the answer was lost; again on the next pass
            # 409 "already CANCELLED": an earlier try committed and its answer was lost
            # (these jobs cannot end any other way while the soak runs).
            if answer.status_code in (200, 202) or (
                answer.status_code == 409 and "CANCELLED" in answer.text
            ):
                self.accepted.add(job_id)


def plan(rng: random.Random) -> list[tuple[str, str | None, float]]:
    """(fault, worker node or None, seconds of calm before it), the outage placed between
    the others with quiet on both sides."""
    kills = [*rng.sample(NODES, len(NODES)), rng.choice(NODES)]
    others: list[tuple[str, str | None]] = [("worker", node) for node in kills]
    others += [("scheduler", None), ("api", None), ("redis", None)]
    rng.shuffle(others)
    at = rng.randrange(2, len(others) - 1)
    ordered = [*others[:at], ("postgres", None), *others[at:]]
    steps = []
    for index, (kind, node) in enumerate(ordered):
        near_outage = "postgres" in (kind, ordered[index - 1][0] if index else "")
        calm = QUIET_S if near_outage else rng.uniform(8, 16)
        steps.append((kind, node, calm))
    return steps


def specs(rng: random.Random) -> list[tuple[dict, bool]]:
    """(spec, cancelled by the test): short digits jobs, half of them checkpointing so a
    restart resumes, and a few that would run far past the soak."""
    made = []
    for index in range(JOBS - CANCELLED):
        checkpoint = {"every_steps": 100} if index % 2 == 0 else {"every_steps": 0}
        spec = job_spec(
            resources={"procs": 1},
            stop={"max_steps": rng.choice([300, 600, 900])},
            checkpoint=checkpoint,
            log_every_steps=20,
            retry={"max_restarts": 20},
        )
        made.append((spec, False))
    for _ in range(CANCELLED):
        long = job_spec(
            resources={"procs": 1},
            stop={"max_steps": 500_000},
            checkpoint={"every_steps": 200},
            log_every_steps=50,
            retry={"max_restarts": 20},
        )
        made.append((long, True))
    rng.shuffle(made)
    return made


@pytest.mark.timeout(45 * 60)
def test_a_soak_of_24_jobs_under_mixed_faults(make_fleet, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    with private_postgres() as postgres, private_redis(tmp_path) as redis:
        fleet = make_fleet(
            nodes=NODES,
            cpu_slots=SLOTS,
            database_url=postgres.url,
            broker_url=redis.url,
            extra_env={
                "AMPFLEET_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
                "AMPFLEET_NODE_TIMEOUT_S": str(NODE_TIMEOUT_S),
                "AMPFLEET_START_TIMEOUT_S": str(START_TIMEOUT_S),
            },
        )
        submitted, to_cancel = [], []
        for spec, cancelled in specs(rng):
            submitted.append(fleet.submit(spec)["id"])
            if cancelled:
                to_cancel.append(submitted[-1])
        schedule = plan(rng)
        length = sum(calm for _, _, calm in schedule)
        cancels = Cancels({job_id: rng.uniform(5, length) for job_id in to_cancel})
        began = time.monotonic()

        def calm(seconds: float) -> None:
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                cancels.send_due(fleet, time.monotonic() - began)
                time.sleep(0.5)

        faults = []
        for kind, node, seconds in schedule:
            calm(seconds)
            faults.append(inject(fleet, postgres, redis, kind, node, calm))
        for _ in range(200):  # a cancel still waiting for its moment, or for an answer
            if cancels.accepted == set(cancels.due):
                break
            cancels.send_due(fleet, float("inf"))
            time.sleep(0.5)
        faults_stopped = time.monotonic()
        stuck, unfinished_after_60s = drain(fleet, faults_stopped)

        engine = create_engine(postgres.url)
        with engine.connect() as conn:
            jobs = dict(conn.execute(select(Job.id, Job.state)).all())
            events = conn.execute(
                select(
                    JobEvent.job_id,
                    JobEvent.attempt,
                    JobEvent.time,
                    JobEvent.to_state,
                    JobEvent.reason,
                    JobEvent.message,
                ).order_by(JobEvent.id)
            ).all()
            allocations = conn.execute(
                select(
                    Allocation.job_id,
                    Allocation.attempt,
                    Allocation.node_id,
                    Allocation.slots,
                    Allocation.created_at,
                    Allocation.released_at,
                )
            ).all()
        engine.dispose()

        cancelled = cancels.accepted
        lost = [j for j in submitted if j not in jobs]
        wrong_end = {
            j: jobs.get(j)
            for j in submitted
            if j in jobs and jobs[j] != ("CANCELLED" if j in cancelled else "SUCCEEDED")
        }
        successes = Counter(j for j, _, _, to, _, _ in events if to == "SUCCEEDED")
        duplicates = [j for j, n in successes.items() if n > 1]
        restarts = [
            Restart(j, attempt, at, reason, message)
            for j, attempt, at, to, reason, message in events
            if to == "RESTARTING"
        ]
        causes = by_cause(
            restarts,
            faults,
            node_timeout_s=NODE_TIMEOUT_S,
            start_timeout_s=START_TIMEOUT_S,
            slack_s=SLACK_S,
        )
        by_outage = [
            describe(r, c)
            for found in causes.values()
            for r, c in found
            if c and c.kind == "postgres"
        ]
        unexplained = [describe(r, c) for found in causes.values() for r, c in found if c is None]
        data_dir = Path(fleet.env["AMPFLEET_DATA_DIR"])
        trained_at_once = attempts_that_trained_at_once(data_dir, jobs)
        overbooked = nodes_over_their_slots(allocations, SLOTS)
        finished = [j for j in submitted if jobs.get(j) == "SUCCEEDED"]
        reported = count_reported(postgres.url, finished)
        # A cancelled job stops mid-series: only what it stored twice is counted for it.
        cut_short = count_reported(postgres.url, sorted(cancelled & set(jobs)))
        twice = {**cut_short.points_repeated, **cut_short.log_lines_repeated}

        kinds = Counter(fault.kind for fault in faults)
        print(
            f"\nmixed soak (seed {SEED}): {len(submitted)} jobs, faults "
            + ", ".join(f"{n} x {kind}" for kind, n in sorted(kinds.items()))
            + f"; cancelled by the test {len(cancelled)} of {len(cancels.due)}; lost "
            f"{len(lost)}, wrong end {len(wrong_end)}, duplicate completions "
            f"{len(duplicates)}, stuck {len(stuck)}, non-final 60 s after the faults stopped "
            f"{unfinished_after_60s}, attempts that trained at once {len(trained_at_once)}, "
            f"nodes over their slots {len(overbooked)}; restarts {len(restarts)} in "
            f"{len(causes)} jobs, caused by the database outage {len(by_outage)}, by no "
            f"injected fault {len(unexplained)}; succeeded jobs: {reported.summary()}; "
            f"cancelled jobs: points or lines stored twice {len(twice)}; {fleet.tally()}; "
            f"next attempt placed before a dead node's rows were released: "
            f"{held_after_the_next_attempt(allocations)}"
        )
        for fault in faults:
            print(
                f"  fault {fault.kind} {fault.node or ''}",
                f"{fault.started:%H:%M:%S}-{fault.ended:%H:%M:%S}",
            )
        for job_id, found in causes.items():
            print(
                f"  {job_id} {jobs.get(job_id)}:", *(describe(r, c) for r, c in found), sep="\n    "
            )
        for job_id in [*wrong_end, *stuck]:
            history = [f"{a} {to} {why}: {m}" for j, a, _, to, why, m in events if j == job_id]
            print(f"  {job_id} {jobs.get(job_id)}:", *history[-10:], sep="\n    ")
        print(*overbooked, sep="\n")
        assert set(cancels.due) == cancelled, "a cancel the API never took"
        assert (lost, wrong_end, duplicates, stuck, trained_at_once, overbooked) == (
            [],
            {},
            [],
            [],
            [],
            [],
        ), fleet.logs()
        assert by_outage == [], by_outage
        assert twice == {}, twice
        reported.assert_complete()


def inject(
    fleet: Fleet,
    postgres: PrivatePostgres,
    redis: PrivateRedis,
    kind: str,
    node: str | None,
    calm: Callable[[float], None],
) -> Fault:
    """One fault, over when this returns; `calm(s)` waits s seconds, cancelling meanwhile."""
    started = datetime.now(UTC)
    if kind == "worker":
        fleet.kill(f"worker-{node}", signal.SIGKILL)
        calm(2)
        fleet.start_worker(str(node))
    elif kind == "scheduler":
        fleet.kill("scheduler", signal.SIGKILL)
        calm(2)
        fleet.start_scheduler("scheduler")
    elif kind == "api":
        fleet.kill("api", signal.SIGKILL)
        calm(1)
        fleet.start_api()
        fleet.wait_until(lambda: _answers(fleet), timeout=120, what="the API back")
    elif kind == "postgres":
        postgres.stop()
        calm(OUTAGE_S)
        postgres.start()
    elif kind == "redis":
        redis.stop()  # it keeps nothing on disk: it comes back empty
        calm(5)
        redis.start()
    return Fault(kind, started, datetime.now(UTC), node)


def _answers(fleet: Fleet) -> bool:
    try:
        return fleet.http.get("/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def drain(fleet: Fleet, faults_stopped: float) -> tuple[list[str], int]:
    """Polls (every 2 s, at most DRAIN_S) until every job has ended. Returns the jobs stuck:
    from STUCK_S after the faults stopped, in a non-final state with no change of state,
    attempt or step for STUCK_S while they could move (placed, or waiting while a slot is
    free: the restart back-off is at most 60 s, so a waiting job gets that too); and how
    many jobs were not final STUCK_S after the faults stopped, for the record."""
    engine = create_engine(fleet.env["AMPFLEET_DATABASE_URL"])
    holding = {s.value for s in SLOT_HOLDING_STATES}
    last: dict[str, tuple[str, int, int]] = {}
    changed: dict[str, float] = defaultdict(time.monotonic)
    stuck: set[str] = set()
    unfinished_after: int | None = None
    try:
        for _ in range(int(DRAIN_S / 2)):
            with engine.connect() as conn:
                rows = conn.execute(select(Job.id, Job.state, Job.attempt, Job.step)).all()
            now = time.monotonic()
            for job_id, state, attempt, step in rows:
                if last.get(job_id) != (state, attempt, step):
                    last[job_id], changed[job_id] = (state, attempt, step), now
            open_jobs = [r for r in rows if r[1] not in TERMINAL]
            if unfinished_after is None and now - faults_stopped >= STUCK_S:
                unfinished_after = len(open_jobs)
            if not open_jobs:
                return sorted(stuck), unfinished_after or 0
            free = SLOTS * len(NODES) - sum(1 for r in rows if r[1] in holding)
            if now - faults_stopped >= STUCK_S:
                for job_id, state, _, _ in open_jobs:
                    idle = now - changed[job_id]
                    waits = state in ("QUEUED", "RESTARTING")
                    if (not waits and idle >= STUCK_S) or (waits and free and idle >= STUCK_S + 60):
                        stuck.add(job_id)
            if stuck:  # said at once, with the fleet as it is
                return sorted(stuck), unfinished_after or 0
            time.sleep(2)
    finally:
        engine.dispose()
    raise AssertionError(
        f"jobs not ended {DRAIN_S:.0f}s after the faults stopped: "
        f"{[(j, s) for j, (s, _, _) in last.items() if s not in TERMINAL]}\n{fleet.logs()}"
    )
