"""Scheduling passes against a real database (no worker processes): placement writes,
explanations, quotas, admission, preemption requests, restart backoff, bulk fencing."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import requeue_or_fail
from ampfleet.core.models import Allocation, Job, Node, OutboxMessage, utcnow
from ampfleet.scheduler.loop import Scheduler
from tests.support.factories import add_node, job_spec, submit


def job_row(job_id: str) -> Job:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def test_a_pass_places_gangs_and_explains_the_rest(client: TestClient) -> None:
    add_node("gpu-1", 8)
    add_node("gpu-2", 8)
    big = submit(client, resources={"nodes": 2, "procs_per_node": 8})
    fits = submit(client, resources={"procs": 4})
    waits = submit(client, resources={"nodes": 1, "procs_per_node": 8})
    assert Scheduler().run_pass() == 1
    assert job_row(big["id"]).state == "SCHEDULED"
    with session_scope() as session:
        allocations = session.scalars(
            select(Allocation).where(Allocation.job_id == big["id"])
        ).all()
        assert sorted((a.node_id, a.slots) for a in allocations) == [("gpu-1", 8), ("gpu-2", 8)]
        assert sorted(a.node_rank for a in allocations) == [0, 1]
        assert session.scalar(select(func.count()).select_from(OutboxMessage)) == 2
    for job in (fits, waits):
        body = client.get(f"/v1/jobs/{job['id']}").json()
        assert body["state"] == "QUEUED"
        assert body["queue"]["position"] in (1, 2)
        assert "waiting for capacity" in body["queue"]["pending_reason"]
    events = client.get(f"/v1/jobs/{big['id']}/events").json()["items"]
    assert [e["to_state"] for e in events] == ["QUEUED", "SCHEDULED"]
    assert Scheduler().run_pass() == 0  # nothing changed: nothing placed twice


def test_a_two_node_job_goes_within_one_rack_and_its_event_says_so(client: TestClient) -> None:
    # Node id order alone would split the job across r1 and r2.
    add_node("gpu-1", 2, labels={"rack": "r1"})
    add_node("gpu-2", 2, labels={"rack": "r2"})
    add_node("gpu-3", 2, labels={"rack": "r1"})
    job = submit(client, resources={"nodes": 2, "procs_per_node": 2})
    assert Scheduler().run_pass() == 1
    with session_scope() as session:
        allocations = session.scalars(
            select(Allocation).where(Allocation.job_id == job["id"]).order_by(Allocation.node_rank)
        ).all()
        assert [(a.node_rank, a.node_id) for a in allocations] == [(0, "gpu-1"), (1, "gpu-3")]
    events = client.get(f"/v1/jobs/{job['id']}/events").json()["items"]
    placed = [e["message"] for e in events if e["reason"] == "placed"]
    assert placed == ["attempt 1 on gpu-1 x2, gpu-3 x2 in rack r1"]
    across = submit(client, resources={"nodes": 2, "procs_per_node": 2})
    add_node("gpu-4", 2, labels={"rack": "r3"})
    assert Scheduler().run_pass() == 1
    events = client.get(f"/v1/jobs/{across['id']}/events").json()["items"]
    assert [e["message"] for e in events if e["reason"] == "placed"] == [
        "attempt 1 on gpu-2 x2, gpu-4 x2 across racks r2, r3 "
        "(no single rack had room for 2 x 2 slots)"
    ]


def test_admission_refuses_what_can_never_fit(client: TestClient) -> None:
    add_node("gpu-1", 8)
    too_wide = client.post("/v1/jobs", json=job_spec(resources={"procs_per_node": 16}))
    assert too_wide.status_code == 422
    detail = too_wide.json()["error"]["details"][0]
    assert detail["field"] == "resources"
    assert "16 slots per node" in detail["message"]
    assert "largest matching node has 8" in detail["message"]
    wrong_gpu = client.post("/v1/jobs", json=job_spec(resources={"gpu_type": "A100"}))
    assert wrong_gpu.status_code == 422
    assert "no registered node matches" in wrong_gpu.json()["error"]["message"]


def test_quotas_queue_limit_and_concurrent_slots(client: TestClient) -> None:
    add_node("gpu-1", 8)
    assert (
        client.put("/v1/projects/default", json={"max_slots": 4, "max_queued_jobs": 2}).status_code
        == 200
    )
    first = submit(client, resources={"procs": 4})
    second = submit(client, resources={"procs": 4})
    refused = client.post("/v1/jobs", json=job_spec())
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0
    assert "limit is 2" in refused.json()["error"]["message"]
    assert Scheduler().run_pass() == 1
    assert job_row(first["id"]).state == "SCHEDULED"
    waiting = client.get(f"/v1/jobs/{second['id']}").json()
    assert "quota of 4 slots" in waiting["queue"]["pending_reason"]
    project = client.get("/v1/projects/default").json()
    assert project["slots_in_use"] == 4


def test_higher_priority_preempts_lower(client: TestClient) -> None:
    add_node("gpu-1", 8)
    low = submit(client, resources={"procs": 8}, priority="low")
    assert Scheduler().run_pass() == 1
    with session_scope() as session:  # its node claimed it: its ranks run until they exit
        session.execute(
            update(Allocation).where(Allocation.job_id == low["id"]).values(launched_at=utcnow())
        )
    high = submit(client, resources={"procs": 8}, priority="high")
    assert Scheduler().run_pass() == 0
    assert job_row(low["id"]).state == "PREEMPTED"
    events = client.get(f"/v1/jobs/{low['id']}/events").json()["items"]
    assert high["id"] in events[-1]["message"]
    pending = client.get(f"/v1/jobs/{high['id']}").json()["queue"]["pending_reason"]
    assert "preempted" in pending
    assert Scheduler().run_pass() == 0  # the victim is still exiting: no second victim
    with session_scope() as session:
        assert (
            session.scalar(select(func.count()).select_from(Job).where(Job.state == "PREEMPTED"))
            == 1
        )


def test_priority_change_moves_a_job_ahead(client: TestClient) -> None:
    add_node("gpu-1", 8)
    blocker = submit(client, resources={"procs": 8})
    Scheduler().run_pass()
    first = submit(client, resources={"procs": 8})
    second = submit(client, resources={"procs": 8})
    Scheduler().run_pass()
    assert client.get(f"/v1/jobs/{second['id']}").json()["queue"]["position"] == 2
    patched = client.patch(f"/v1/jobs/{second['id']}", json={"priority": "high"})
    assert patched.json()["priority"] == "high"
    Scheduler().run_pass()
    assert client.get(f"/v1/jobs/{second['id']}").json()["queue"]["position"] == 1
    assert client.get(f"/v1/jobs/{first['id']}").json()["queue"]["position"] == 2
    assert blocker["id"]


def test_lost_attempts_back_off_before_the_next_placement(client: TestClient) -> None:
    add_node("gpu-1", 8)
    job = submit(client, resources={"procs": 2})
    Scheduler().run_pass()
    with session_scope() as session:
        assert requeue_or_fail(session, job["id"], 1, reason="node_lost", message="gone")
    assert Scheduler().run_pass() == 0
    queued = client.get(f"/v1/jobs/{job['id']}").json()
    assert "restart backoff" in queued["queue"]["pending_reason"]
    with session_scope() as session:
        row = session.get(Job, job["id"])
        assert row is not None
        row.not_before = utcnow() - timedelta(seconds=1)
    assert Scheduler().run_pass() == 1
    assert job_row(job["id"]).attempt == 2


def test_dead_nodes_are_reaped(client: TestClient) -> None:
    add_node("gpu-1", 8)
    job = submit(client, resources={"procs": 2})
    Scheduler().run_pass()
    with session_scope() as session:
        node = session.get(Node, "gpu-1")
        assert node is not None
        node.last_heartbeat_at = utcnow() - timedelta(minutes=5)
    Scheduler().run_pass()
    events = client.get(f"/v1/jobs/{job['id']}/events").json()["items"]
    assert ("SCHEDULED", "RESTARTING", "node_lost") in [
        (e["from_state"], e["to_state"], e["reason"]) for e in events
    ]
    assert job_row(job["id"]).state == "QUEUED"


def test_concurrent_jobs_quota(client: TestClient) -> None:
    add_node("gpu-1", 8)
    client.put("/v1/projects/default", json={"max_running_jobs": 1})
    first = submit(client, resources={"procs": 1})
    second = submit(client, resources={"procs": 1})
    assert Scheduler().run_pass() == 1
    assert job_row(first["id"]).state == "SCHEDULED"
    reason = client.get(f"/v1/jobs/{second['id']}").json()["queue"]["pending_reason"]
    assert "quota of 1 concurrent jobs" in reason
