"""Preemption with real processes: the low-priority job checkpoints, goes back to the queue,
and resumes from that exact step once the high-priority job is done."""

from __future__ import annotations

import re

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import transitions

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
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
