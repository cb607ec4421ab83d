"""Soak: hundreds of jobs while a worker is killed every 10 seconds (and comes back).
Counted: lost jobs, duplicate completions, attempts of one job that trained at once, node
slots held by more than their count, metric points and log lines lost or repeated; all must
be zero, and every job must end SUCCEEDED. Long tier: 120 jobs there, to fit the tier's hour
on two cores; the 300-job figures in BENCHMARKS.md come from AMPFLEET_SOAK_JOBS=300.

Two attempts at once is read from what their ranks wrote (the time of each record in the
attempt's run folder), not from allocation rows: a dead node's claimed rows are released
only by its next worker (core/allocations.py), so the job's next attempt elsewhere may start
while they are still held, with no rank of the earlier one alive. Those rows are checked for
what they guard instead: no node ever has more slots held than it has."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from ampfleet.core.models import Allocation, Job, JobEvent
from tests.faults.overlap import (
    attempts_that_trained_at_once,
    held_after_the_next_attempt,
    nodes_over_their_slots,
)
from tests.faults.reported import count_reported
from tests.support.factories import job_spec

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
NODES = ("node-a", "node-b", "node-c")
SLOTS = 1


@pytest.mark.timeout(60 * 60)
def test_soak_with_a_worker_killed_every_10s(make_fleet) -> None:
    total = int(os.environ.get("AMPFLEET_SOAK_JOBS", "120"))
    fleet = make_fleet(
        nodes=NODES,
        cpu_slots=SLOTS,
        extra_env={"AMPFLEET_NODE_TIMEOUT_S": "4", "AMPFLEET_START_TIMEOUT_S": "30"},
    )
    spec = job_spec(
        resources={"procs": 1},
        stop={"max_steps": 10},
        checkpoint={"every_steps": 5},
        log_every_steps=2,
        retry={"max_restarts": 20},
    )
    submitted = [fleet.submit(spec)["id"] for _ in range(total)]
    victims = itertools.cycle(NODES)
    kills = 0
    deadline = time.monotonic() + 60 * 55
    while time.monotonic() < deadline:
        states = [j["state"] for j in _all_jobs(fleet)]
        if all(s in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT") for s in states):
            break
        victim = next(victims)
        fleet.kill(f"worker-{victim}", signal.SIGKILL)
        kills += 1
        time.sleep(2)
        fleet.start_worker(victim)
        time.sleep(8)

    engine = create_engine(fleet.env["AMPFLEET_DATABASE_URL"])
    with engine.connect() as conn:
        jobs = dict(conn.execute(select(Job.id, Job.state)).all())
        successes: dict[str, int] = defaultdict(int)
        for (job_id,) in conn.execute(
            select(JobEvent.job_id).where(JobEvent.to_state == "SUCCEEDED")
        ):
            successes[job_id] += 1
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

    lost = [j for j in submitted if j not in jobs]
    not_finished = [j for j in submitted if jobs.get(j) != "SUCCEEDED"]
    duplicates = [j for j, n in successes.items() if n > 1]
    attempts_of: dict[str, set[int]] = defaultdict(set)
    for job_id, attempt, *_ in allocations:
        attempts_of[job_id].add(attempt)
    restarted = sum(1 for attempts in attempts_of.values() if len(attempts) > 1)
    trained_at_once = attempts_that_trained_at_once(Path(fleet.env["AMPFLEET_DATA_DIR"]), jobs)
    overbooked = nodes_over_their_slots(allocations, SLOTS)
    held_past_requeue = held_after_the_next_attempt(allocations)
    reported = count_reported(
        fleet.env["AMPFLEET_DATABASE_URL"], [j for j in submitted if j in jobs]
    )
    print(
        f"\nsoak: {total} jobs, {kills} worker kills, {restarted} jobs restarted; "
        f"lost {len(lost)}, duplicate completions {len(duplicates)}, attempts that trained "
        f"at once {len(trained_at_once)}, nodes over their slots {len(overbooked)}, not "
        f"SUCCEEDED {len(not_finished)}; {reported.summary()}; {fleet.tally()}; "
        f"next attempt started before a dead node's rows were released: {held_past_requeue}"
    )
    for job_id in not_finished:
        print(
            f"{job_id} {jobs.get(job_id)}:",
            *(
                f"  {e['attempt']} {e['reason']}: {e['message']}"
                for e in _events(fleet, job_id)[-8:]
            ),
            sep="\n",
        )
    print(*overbooked, sep="\n")
    assert (lost, duplicates, trained_at_once, overbooked, not_finished) == (
        [],
        [],
        [],
        [],
        [],
    )
    reported.assert_complete()


def _all_jobs(fleet) -> list[dict]:
    jobs, cursor = [], None
    while True:
        page = fleet.http.get(
            "/v1/jobs", params={"limit": 200, **({"cursor": cursor} if cursor else {})}
        ).json()
        jobs += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return jobs


def _events(fleet, job_id: str) -> list[dict]:
    answer = fleet.http.get(f"/v1/jobs/{job_id}/events", params={"limit": 500})
    return list(answer.json()["items"])
