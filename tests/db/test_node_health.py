"""Nodes where attempts keep hanging are cordoned, with the reason on the node and an event
on the job; hangs elsewhere, long ago, or other reasons do not count; an operator's cordon
and uncordon set and clear the reason."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.node_health import HUNG, cordon_if_hanging, hangs_on_node
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from tests.support.factories import add_node, insert_job


def ended(job_id: str, attempt: int, node_id: str, reason: str, ago_s: float = 0) -> None:
    """Attempt `attempt` of the job held a slot on `node_id` and ended for `reason`."""
    with session_scope() as session:
        session.add(
            Allocation(
                job_id=job_id,
                attempt=attempt,
                node_rank=0,
                node_id=node_id,
                slots=1,
                released_at=utcnow(),
            )
        )
        session.add(
            JobEvent(
                job_id=job_id,
                attempt=attempt,
                time=utcnow() - timedelta(seconds=ago_s),
                kind="transition",
                reason=reason,
                message="",
            )
        )


def cordon_after(job_id: str, node_id: str, hangs: int) -> bool:
    settings = get_settings().model_copy(update={"cordon_after_hangs": hangs})
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return cordon_if_hanging(session, node_id, job, settings)


def test_the_third_hang_within_the_window_cordons_the_node(client: TestClient) -> None:
    add_node("gpu-1", 2)
    add_node("gpu-2", 2)
    job_id = insert_job(state=JobState.QUEUED, attempt=5)
    ended(job_id, 0, "gpu-1", HUNG)
    ended(job_id, 1, "gpu-1", HUNG, ago_s=2 * 3600)  # outside the hour
    ended(job_id, 2, "gpu-1", "node_lost")  # not a hang
    ended(job_id, 3, "gpu-2", HUNG)  # another node's
    ended(job_id, 4, "gpu-1", HUNG)
    with session_scope() as session:
        assert hangs_on_node(session, "gpu-1", 3600) == 2
    assert not cordon_after(job_id, "gpu-1", hangs=3)
    assert not cordon_after(job_id, "gpu-1", hangs=0)  # 0: never
    ended(job_id, 5, "gpu-1", HUNG)
    assert cordon_after(job_id, "gpu-1", hangs=3)
    assert not cordon_after(job_id, "gpu-1", hangs=3)  # cordoned once

    nodes = {n["id"]: n for n in client.get("/v1/nodes").json()["items"]}
    node = nodes["gpu-1"]
    assert node["state"] == "cordoned"
    assert node["state_reason"].startswith("cordoned automatically: 3 attempts hung on it")
    assert (nodes["gpu-2"]["state"], nodes["gpu-2"]["state_reason"]) == ("ready", None)
    [event] = [
        e
        for e in client.get(f"/v1/jobs/{job_id}/events").json()["items"]
        if e["reason"] == "node_cordoned"
    ]
    assert "POST /v1/nodes/gpu-1/uncordon" in event["message"]

    assert client.post("/v1/nodes/gpu-1/uncordon").json()["state_reason"] is None


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("cordon", "cordoned by an operator"),
        ("drain", "drained by an operator"),
    ],
)
def test_an_operators_cordon_says_so(client: TestClient, action: str, reason: str) -> None:
    add_node("gpu-1", 2)
    client.post(f"/v1/nodes/gpu-1/{action}").raise_for_status()
    with session_scope() as session:
        node = session.get(Node, "gpu-1")
        assert node is not None
        assert (node.state, node.state_reason) == ("cordoned", reason)
