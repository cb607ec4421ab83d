"""GET /v1/queue: queued jobs in the scheduler's order, paged, per project."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, Node, utcnow
from ampfleet.core.states import JobState
from tests.support.factories import insert_job, submit


def whole_queue(client: TestClient, limit: int, **params: str) -> list[dict]:
    """Every page, following next_cursor to the end."""
    items: list[dict] = []
    cursor = None
    for _ in range(100):
        page = client.get(
            "/v1/queue", params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        )
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["items"]) <= limit
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("the cursor never ran out")


def charge(project: str, slot_seconds: float) -> None:
    """Fair-share usage: a finished job of `project` that held two slots, half that long."""
    job_id = insert_job(state=JobState.SUCCEEDED)
    now = utcnow()
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(project=project))
        if session.get(Node, "usage-node") is None:
            session.add(
                Node(id="usage-node", queue="q", address="127.0.0.1", accelerator="cpu", slots=2)
            )
            session.flush()
        session.add(
            Allocation(
                job_id=job_id,
                attempt=0,
                node_id="usage-node",
                node_rank=0,
                slots=2,
                created_at=now - timedelta(seconds=slot_seconds / 2),
                released_at=now,
            )
        )


def test_order_is_priority_then_weighted_share_then_fifo(client: TestClient) -> None:
    charge("heavy", 1000)
    charge("weighted", 1500)
    weighted = client.put("/v1/projects/weighted", json={"weight": 3.0})
    assert weighted.status_code == 200, weighted.text  # 1500 / 3: below heavy
    heavy_1 = submit(client, project="heavy")["id"]
    light_1 = submit(client, project="light")["id"]
    weighted_1 = submit(client, project="weighted")["id"]
    heavy_high = submit(client, project="heavy", priority="high")["id"]
    light_2 = submit(client, project="light")["id"]
    low = submit(client, project="light", priority="low")["id"]
    backing_off = submit(client, project="light", priority="high")["id"]
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == backing_off)
            .values(not_before=utcnow() + timedelta(hours=1))
        )

    items = whole_queue(client, limit=50)
    assert [item["id"] for item in items] == [
        heavy_high,
        light_1,
        light_2,  # light has no usage: all of it before the others of its class
        weighted_1,
        heavy_1,
        low,
        backing_off,  # in restart backoff: after everything the next pass considers
    ]
    assert [item["position"] for item in items] == list(range(1, 8))
    assert items[0]["priority"] == "high"
    assert items[-1]["not_before"] is not None
    assert items[0]["gang_size"] == 2


def test_pages_cover_the_queue_once_in_order(client: TestClient) -> None:
    ids = [submit(client, name=f"q{i}")["id"] for i in range(7)]
    first = client.get("/v1/queue", params={"limit": 3}).json()
    assert [item["id"] for item in first["items"]] == ids[:3]
    assert first["total"] == 7
    assert first["next_cursor"]

    items = whole_queue(client, limit=3)
    assert [item["id"] for item in items] == ids
    assert [item["position"] for item in items] == list(range(1, 8))


def test_a_page_continues_where_the_last_ended_when_its_job_left(client: TestClient) -> None:
    ids = [submit(client)["id"] for _ in range(5)]
    first = client.get("/v1/queue", params={"limit": 2}).json()
    assert client.post(f"/v1/jobs/{ids[1]}/cancel").status_code == 202  # the cursor's job
    assert client.post(f"/v1/jobs/{ids[0]}/cancel").status_code == 202  # and one before it
    rest = client.get("/v1/queue", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [item["id"] for item in rest["items"]] == ids[2:4]
    assert [item["position"] for item in rest["items"]] == [1, 2]  # positions are now's
    assert rest["total"] == 3


def test_a_project_sees_its_own_jobs_at_their_fleet_positions(app, make_key) -> None:
    alpha = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    beta = TestClient(app, headers={"Authorization": f"Bearer {make_key('beta', 'read')}"})
    admin = TestClient(app, headers={"Authorization": f"Bearer {make_key()}"})
    alpha_jobs = [submit(alpha)["id"] for _ in range(3)]
    beta_job = submit(admin, project="beta")["id"]

    seen = beta.get("/v1/queue").json()
    assert [(item["id"], item["position"]) for item in seen["items"]] == [(beta_job, 4)]
    assert seen["total"] == 1
    assert beta.get("/v1/queue", params={"project": "alpha"}).json() == {
        "items": [],
        "total": 0,
        "next_cursor": None,
    }
    assert [item["id"] for item in whole_queue(alpha, limit=2)] == alpha_jobs
    filtered = admin.get("/v1/queue", params={"project": "beta"}).json()["items"]
    assert [item["id"] for item in filtered] == [beta_job]
    assert len(admin.get("/v1/queue").json()["items"]) == 4


def encoded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "%%%",
        "not-base64!",
        encoded(b"not json"),
        encoded(b'{"id": "job_x"}'),
        encoded(b'[0, -1, "share", "job_x"]'),
        encoded(b'[0, -1, NaN, "job_x"]'),
        encoded(b'[2, -1, 0.0, "job_x"]'),
        encoded(b'[0, -1, 0.0, "key_x"]'),
    ],
)
def test_a_bad_cursor_is_a_422_in_the_envelope(client: TestClient, cursor: str) -> None:
    response = client.get("/v1/queue", params={"cursor": cursor})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["field"] == "cursor"


def test_the_queue_needs_a_key(anonymous: TestClient) -> None:
    response = anonymous.get("/v1/queue")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
