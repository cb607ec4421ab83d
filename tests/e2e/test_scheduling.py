"""The scheduler with real processes: a node dies, a job is preempted, a scheduler is
killed. Each time the jobs end in the right state and nothing runs twice at once."""

from __future__ import annotations

import re
import signal

import pytest
from sqlalchemy import create_engine, func, select

from ampfleet.core.models import Allocation, JobEvent
from tests.factories import job_spec
from tests.support.fleet import Fleet, rank_processes

pytestmark = pytest.mark.e2e


def placed_on(fleet: Fleet, job_id: str, attempt: int) -> list[str]:
    for event in fleet.events(job_id):
        if event["to_state"] == "SCHEDULED" and event["attempt"] == attempt:
            return re.findall(r"(node-\w+) x\d+", event["message"])
    raise AssertionError(f"attempt {attempt} of {job_id} was never placed")


def transitions(fleet: Fleet, job_id: str) -> list[tuple[str | None, str, str]]:
    return [
        (e["from_state"], e["to_state"], e["reason"])
        for e in fleet.events(job_id)
        if e["kind"] == "transition"
    ]


def test_node_death_requeues_and_finishes_from_the_checkpoint(make_fleet) -> None:
    fleet = make_fleet(nodes=("node-a", "node-b"), extra_env={"AMPFLEET_NODE_TIMEOUT_S": "4"})
    job = fleet.submit(
        job_spec(stop={"max_steps": 3000}, checkpoint={"every_steps": 100}, log_every_steps=50)
    )
    fleet.wait_until(
        lambda: fleet.job(job["id"])["progress"]["step"] >= 300,
        timeout=120,
        what="training past a checkpoint",
    )
    [victim] = placed_on(fleet, job["id"], 1)
    fleet.kill(f"worker-{victim}", signal.SIGKILL)
    # Its ranks die with it (parent-death signal): never two attempts at once.
    fleet.wait_until(lambda: rank_processes(job["id"]) == [], timeout=30, what="ranks gone")

    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=240)
    assert done["attempt"] == 2
    [survivor] = placed_on(fleet, job["id"], 2)
    assert survivor != victim
    history = transitions(fleet, job["id"])
    assert ("RUNNING", "RESTARTING", "node_lost") in history
    assert ("RESTARTING", "QUEUED", "requeued") in history
    resumed = [e for e in fleet.events(job["id"]) if e["to_state"] == "RUNNING"][-1]
    step = int(re.search(r"resumed at step (\d+)", resumed["message"]).group(1))
    assert step >= 300
    assert done["latest_metrics"]["val_accuracy"] >= 0.9


def test_preemption_checkpoints_requeues_and_resumes(make_fleet) -> None:
    fleet = make_fleet()
    low = fleet.submit(
        job_spec(
            stop={"max_steps": 1_000_000},
            priority="low",
            checkpoint={"every_steps": 1000},
            log_every_steps=100,
        )
    )
    fleet.wait_until(
        lambda: fleet.job(low["id"])["progress"]["step"] >= 200,
        timeout=120,
        what="the low-priority job running",
    )
    high = fleet.submit(job_spec(stop={"max_steps": 100}, priority="high"))
    fleet.wait_for_state(high["id"], {"SUCCEEDED"}, timeout=180)
    fleet.wait_until(
        lambda: fleet.job(low["id"])["attempt"] == 2 and fleet.job(low["id"])["state"] == "RUNNING",
        timeout=120,
        what="the preempted job running again",
    )
    history = transitions(fleet, low["id"])
    assert ("RUNNING", "PREEMPTED", "preempted") in history
    requeued = next(
        e for e in fleet.events(low["id"]) if e["reason"] == "requeued_after_preemption"
    )
    found = re.search(r"checkpointed at step (\d+)", requeued["message"])
    assert found, (requeued["message"], fleet.logs(tail=400))
    checkpointed = int(found.group(1))
    resumed = [e for e in fleet.events(low["id"]) if e["to_state"] == "RUNNING"][-1]
    assert f"resumed at step {checkpointed}" in resumed["message"]
    # The high-priority job only started once the low one had let go of the slots.
    high_started = next(e["time"] for e in fleet.events(high["id"]) if e["to_state"] == "STARTING")
    assert requeued["time"] <= high_started
    fleet.http.post(f"/v1/jobs/{low['id']}/cancel")
    fleet.wait_for_state(low["id"], {"CANCELLED"}, timeout=60)


def test_a_killed_scheduler_is_replaced_without_double_placement(make_fleet) -> None:
    fleet = make_fleet(start_schedulers=2)
    fleet.kill("scheduler", signal.SIGKILL)
    jobs = [fleet.submit(job_spec(stop={"max_steps": 30})) for _ in range(3)]
    for job in jobs:
        fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=180)
    engine = create_engine(fleet.env["AMPFLEET_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            per_attempt = conn.execute(
                select(Allocation.job_id, Allocation.attempt, func.count()).group_by(
                    Allocation.job_id, Allocation.attempt
                )
            ).all()
            placements = conn.execute(
                select(JobEvent.job_id, func.count())
                .where(JobEvent.to_state == "SCHEDULED")
                .group_by(JobEvent.job_id)
            ).all()
    finally:
        engine.dispose()
    assert sorted(count for _, _, count in per_attempt) == [1, 1, 1]
    assert sorted(count for _, count in placements) == [1, 1, 1]
