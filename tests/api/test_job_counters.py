"""The fleet's job counters, slot utilisation and queue wait on /metrics: submitted and
finished jobs are counted once each, as the transition happens, never lowered by deleting
jobs; a transaction (or savepoint) rolled back counts nothing; on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from ampfleet.core import counters
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Job, JobEvent, Node, utcnow
from ampfleet.core.states import JobState
from ampfleet.scheduler.loop import Scheduler
from tests.support.factories import add_node, job_spec, submit
from tests.support.prometheus import samples, scrape

FINISHED = "ampfleet_jobs_finished_total"


def finished(seen: dict[str, float]) -> dict[str, float]:
    return {
        key.split('"')[1]: value for key, value in seen.items() if key.startswith(FINISHED + "{")
    }


def fail(job_id: str) -> None:
    with session_scope() as session:
        assert transition(
            session, job_id, JobState.FAILED, from_states={JobState.QUEUED}, reason="test"
        )


def test_each_job_is_counted_once_and_deleting_jobs_lowers_nothing(client: TestClient) -> None:
    first = scrape(client)
    assert samples(first)["ampfleet_jobs_submitted_total"] == 0
    assert finished(samples(first)) == dict.fromkeys(
        ("CANCELLED", "FAILED", "SUCCEEDED", "TIMED_OUT"), 0
    )  # every final state from the start, so the first of each is a rise rate() sees

    keyed = {"Idempotency-Key": "nightly-1"}
    jobs = [client.post("/v1/jobs", json=job_spec(), headers=keyed).json()]
    again = client.post("/v1/jobs", json=job_spec(), headers=keyed)
    assert again.json()["id"] == jobs[0]["id"]  # the replay is no new submit
    jobs += [submit(client) for _ in range(3)]
    for job in jobs[:2]:
        assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 202
    client.post(f"/v1/jobs/{jobs[0]['id']}/cancel")  # a second cancel ends nothing new
    fail(jobs[2]["id"])

    counted = samples(scrape(client))
    assert counted["ampfleet_jobs_submitted_total"] == 4
    assert finished(counted) == {"CANCELLED": 2, "FAILED": 1, "SUCCEEDED": 0, "TIMED_OUT": 0}

    for job in jobs[:3]:
        assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    after = samples(scrape(client))
    assert after['ampfleet_jobs{state="CANCELLED"}'] == 0  # the gauge goes down with the rows
    assert after["ampfleet_jobs_submitted_total"] == 4
    assert finished(after) == finished(counted)


def fail_then_raise(session: Session, job_id: str) -> None:
    transition(session, job_id, JobState.FAILED, from_states={JobState.QUEUED}, reason="x")
    raise RuntimeError("what follows the transition fails")


def test_what_rolls_back_counts_nothing(client: TestClient) -> None:
    kept, undone, refused = (submit(client)["id"] for _ in range(3))
    with pytest.raises(RuntimeError), session_scope() as session:  # the whole unit of work
        fail_then_raise(session, refused)
    with session_scope() as session:
        with pytest.raises(RuntimeError), session.begin_nested():  # only the savepoint
            fail_then_raise(session, undone)
        with session.begin_nested():  # released: counted with the transaction around it
            transition(session, kept, JobState.FAILED, from_states={JobState.QUEUED}, reason="x")
    with session_scope() as session:
        states = {job.id: job.state for job in session.query(Job)}
        assert counters.totals(session)[(counters.JOBS_FINISHED, "FAILED")] == 1
    assert states == {kept: "FAILED", undone: "QUEUED", refused: "QUEUED"}
    assert finished(samples(scrape(client)))["FAILED"] == 1


def test_slots_of_live_nodes_and_how_many_are_held(client: TestClient) -> None:
    add_node("n1", slots=4)
    add_node("n2", slots=4)
    add_node("gone", slots=8)
    with session_scope() as session:
        session.execute(
            update(Node)
            .where(Node.id == "gone")
            .values(last_heartbeat_at=utcnow() - timedelta(hours=1))
        )
    empty = samples(scrape(client))
    assert (empty["ampfleet_slots"], empty["ampfleet_slots_used"]) == (8, 0)
    assert empty["ampfleet_slots_utilization_ratio"] == 0
    for _ in range(3):
        submit(client)  # two ranks each
    assert Scheduler().run_pass() == 3
    placed = samples(scrape(client))
    assert (placed["ampfleet_slots"], placed["ampfleet_slots_used"]) == (8, 6)
    assert placed["ampfleet_slots_utilization_ratio"] == 0.75
    assert client.post("/v1/nodes/n2/cordon").status_code == 200  # it still runs what it holds
    assert samples(scrape(client))["ampfleet_slots"] == 8


def test_the_queue_wait_is_the_oldest_ready_jobs(client: TestClient) -> None:
    assert samples(scrape(client))["ampfleet_queue_oldest_wait_seconds"] == 0
    waiting, backing_off = submit(client)["id"], submit(client)["id"]
    with session_scope() as session:
        hour_ago = utcnow() - timedelta(hours=1)
        session.execute(
            update(Job).where(Job.id == backing_off).values(not_before=utcnow() + timedelta(days=1))
        )
        session.execute(
            update(JobEvent)
            .where(JobEvent.job_id.in_([waiting, backing_off]))
            .values(time=hour_ago)
        )
    wait = samples(scrape(client))["ampfleet_queue_oldest_wait_seconds"]
    assert 3600 <= wait < 3700  # the one whose backoff has not ended is not waiting yet
    client.post(f"/v1/jobs/{waiting}/cancel")
    assert samples(scrape(client))["ampfleet_queue_oldest_wait_seconds"] == 0
