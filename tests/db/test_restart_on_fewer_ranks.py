"""resources.procs_min through real scheduling passes: a 2-node job whose node died is
restarted on the node that is left, and its placement event says what changed."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, Node, utcnow
from ampfleet.scheduler.loop import Scheduler
from tests.support.factories import add_node, submit


def _lose(node_id: str) -> None:
    """The node stops beating; a pass reaps it and requeues its job, whose restart
    backoff is then cut short."""
    with session_scope() as session:
        node = session.get(Node, node_id)
        assert node is not None
        node.last_heartbeat_at = utcnow() - timedelta(minutes=5)
    Scheduler().run_pass()
    with session_scope() as session:
        for job in session.scalars(select(Job).where(Job.state == "QUEUED")):
            job.not_before = utcnow() - timedelta(seconds=1)


def test_a_restart_runs_on_the_node_left_when_procs_min_allows(client: TestClient) -> None:
    add_node("gpu-1", 2)
    add_node("gpu-2", 2)
    shape = {"nodes": 2, "procs_per_node": 2}
    flexible = submit(client, resources={**shape, "procs_min": 2})
    assert Scheduler().run_pass() == 1
    _lose("gpu-2")
    assert Scheduler().run_pass() == 1
    with session_scope() as session:
        job = session.get(Job, flexible["id"])
        assert job is not None
        assert (job.state, job.attempt) == ("SCHEDULED", 2)
        allocations = session.scalars(
            select(Allocation).where(Allocation.job_id == job.id, Allocation.attempt == 2)
        ).all()
        assert [(a.node_id, a.slots) for a in allocations] == [("gpu-1", 2)]
    events = client.get(f"/v1/jobs/{flexible['id']}/events").json()["items"]
    placed = [e for e in events if e["reason"] == "placed"]
    assert placed[0]["message"] == "attempt 1 on gpu-1 x2, gpu-2 x2"
    assert placed[1]["message"].startswith("attempt 2 on gpu-1 x2: 2 of its 4 ranks")


def test_without_procs_min_the_restart_waits_for_its_shape(client: TestClient) -> None:
    add_node("gpu-1", 2)
    add_node("gpu-2", 2)
    rigid = submit(client, resources={"nodes": 2, "procs_per_node": 2})
    assert Scheduler().run_pass() == 1
    _lose("gpu-2")
    assert Scheduler().run_pass() == 0
    body = client.get(f"/v1/jobs/{rigid['id']}").json()
    assert body["state"] == "QUEUED"
    reason = body["queue"]["pending_reason"]
    assert reason.startswith("no node matches: requested 2 nodes with 2 slots each"), reason
    assert "1 matching node(s) are cordoned or down" in reason
