"""Keys, roles and tenant isolation, walked over every route in the OpenAPI document."""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi.testclient import TestClient

from tests.support.env import environment
from tests.support.factories import job_spec

PUBLIC = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/v1/console-sessions",  # its credential is the login token in the body
}
ADMIN_ONLY = {
    ("put", "/v1/projects/{name}"),
    ("post", "/v1/nodes/{node_id}/cordon"),
    ("post", "/v1/nodes/{node_id}/uncordon"),
    ("post", "/v1/nodes/{node_id}/drain"),
}


def operations(client: TestClient) -> list[tuple[str, str]]:
    schema = client.get("/openapi.json").json()
    return [
        (method, path)
        for path, item in schema["paths"].items()
        for method in item
        if path not in PUBLIC and not path.startswith("/ui")
    ]


def fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x"), path)


def test_every_operation_needs_a_key(anonymous: TestClient) -> None:
    ops = operations(anonymous)
    assert len(ops) >= 12
    # One wrong key per operation, from one address: more operations than the wrong-key
    # burst would meet its 429 (tested on its own in test_ratelimit.py), not the 401.
    with environment({"AMPFLEET_AUTH_FAILURE_BURST": str(10 * len(ops))}):
        _each_needs_a_key(anonymous, ops)


def _each_needs_a_key(anonymous: TestClient, ops: list[tuple[str, str]]) -> None:
    for method, path in ops:
        response = anonymous.request(method, fill(path, {}), json={})
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"]["code"] == "unauthorized"
        bad = anonymous.request(
            method, fill(path, {}), json={}, headers={"Authorization": "Bearer amp_nope_nope"}
        )
        assert bad.status_code == 401, (method, path)


def test_another_projects_objects_do_not_exist(app, make_key) -> None:
    owner = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    other = TestClient(app, headers={"Authorization": f"Bearer {make_key('beta', 'write')}"})
    job = owner.post("/v1/jobs", json=job_spec()).json()
    assert job["project"] == "alpha"
    key = owner.post("/v1/keys", json={"role": "read", "name": "ci"}).json()
    with environment({"AMPFLEET_WEBHOOK_ALLOW_PRIVATE": "true"}):
        hook = owner.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook"}).json()
    values = {
        "job_id": job["id"],
        "key_id": key["id"],
        "name": "alpha",
        "node_id": "nope",
        "step": "1",
        "webhook_id": hook["id"],
    }
    bodies = {
        "/v1/jobs/{job_id}": {"priority": "high"},
        "/v1/jobs/{job_id}/profile": {"steps": 2},
        "/v1/projects/{name}": {"weight": 2.0},
        "/v1/webhooks/{webhook_id}": {"payload_version": "flat"},
    }
    for method, path in operations(other):
        if "{" not in path:
            continue
        response = other.request(method, fill(path, values), json=bodies.get(path))
        expected = 403 if (method, path) in ADMIN_ONLY else 404
        assert response.status_code == expected, (method, path, response.text)
        assert response.json()["error"]["code"] in ("not_found", "forbidden")
    listed = other.get("/v1/jobs").json()["items"]
    assert listed == []
    assert other.get("/v1/jobs", params={"project": "alpha"}).json()["items"] == []
    assert [k["project"] for k in other.get("/v1/keys").json()["items"]] == ["beta"]
    # ... and nothing of alpha's changed.
    assert owner.get(f"/v1/jobs/{job['id']}").json()["state"] == "QUEUED"
    assert owner.get(f"/v1/jobs/{job['id']}").json()["priority"] == "normal"


def test_submitting_into_another_project_is_forbidden(app, make_key) -> None:
    writer = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    response = writer.post("/v1/jobs", json=job_spec(project="beta"))
    assert response.status_code == 403


def test_read_only_keys_look_but_do_not_touch(app, make_key) -> None:
    writer = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    reader = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'read')}"})
    job = writer.post("/v1/jobs", json=job_spec()).json()
    assert reader.get(f"/v1/jobs/{job['id']}").status_code == 200
    assert reader.post("/v1/jobs", json=job_spec()).status_code == 403
    assert reader.post(f"/v1/jobs/{job['id']}/cancel").status_code == 403
    assert reader.patch(f"/v1/jobs/{job['id']}", json={"priority": "high"}).status_code == 403
    assert reader.post("/v1/keys", json={}).status_code == 403


def test_keys_are_shown_once_hashed_and_revocable(client: TestClient, app) -> None:
    created = client.post("/v1/keys", json={"project": "gamma", "role": "write"})
    assert created.status_code == 201
    key = created.json()["key"]
    assert key.startswith("amp_")
    listed = client.get("/v1/keys", params={"project": "gamma"}).json()["items"]
    assert len(listed) == 1
    assert "key" not in listed[0]
    holder = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    assert holder.get("/v1/jobs").status_code == 200
    assert holder.post("/v1/keys", json={"role": "admin"}).status_code == 403
    assert client.delete(f"/v1/keys/{created.json()['id']}").status_code == 204
    assert holder.get("/v1/jobs").status_code == 401


def test_a_read_records_when_its_key_was_last_used(client: TestClient, app) -> None:
    """The read's own session stays read-only (on SQLite it could not write safely); the
    last-used time is written apart from it, and a read-only session refuses writes."""
    created = client.post("/v1/keys", json={"project": "delta", "role": "read"}).json()
    reader = TestClient(app, headers={"Authorization": f"Bearer {created['key']}"})

    def last_used() -> str | None:
        keys = client.get("/v1/keys", params={"project": "delta"}).json()["items"]
        return next(k["last_used_at"] for k in keys if k["id"] == created["id"])

    assert last_used() is None
    assert reader.get("/v1/jobs").status_code == 200
    assert last_used() is not None


def test_admin_routes_need_admin(app, make_key) -> None:
    writer = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    assert writer.put("/v1/projects/alpha", json={"max_slots": 99}).status_code == 403
    assert writer.get("/v1/projects/alpha").status_code == 200


@pytest.fixture
def strict_limit():
    with environment({"AMPFLEET_RATE_LIMIT_PER_S": "0.5", "AMPFLEET_RATE_LIMIT_BURST": "3"}):
        yield


def test_rate_limit_per_key(backend, strict_limit, make_key) -> None:
    from ampfleet.api.app import create_app

    app = create_app()
    limited = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'read')}"})
    fresh = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'read')}"})
    codes = [limited.get("/v1/jobs").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    refused = limited.get("/v1/jobs")
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert int(refused.headers["Retry-After"]) >= 1
    assert fresh.get("/v1/jobs").status_code == 200  # the limit is per key


@pytest.fixture
def strict_address_limit():
    values = {"AMPFLEET_AUTH_FAILURE_RATE_PER_S": "0.01", "AMPFLEET_AUTH_FAILURE_BURST": "3"}
    with environment(values):
        yield


def test_wrong_keys_are_limited_per_client_address(backend, strict_address_limit, make_key):
    """A key that does not exist has no bucket of its own; its address has one."""
    from ampfleet.api.app import create_app

    app = create_app()
    address = f"guesser-{uuid.uuid4().hex[:8]}"  # buckets outlive a test
    wrong = {"Authorization": "Bearer amp_nope_nope"}
    guesser = TestClient(app, client=(address, 50000), headers=wrong)
    codes = [guesser.get("/v1/jobs").status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    refused = guesser.get("/v1/jobs", headers={"X-API-Key": "amp_other_guess"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert int(refused.headers["Retry-After"]) >= 1
    # A valid key from that address, a request with no key, another address: unaffected.
    valid = {"Authorization": f"Bearer {make_key('alpha', 'read')}"}
    assert guesser.get("/v1/jobs", headers=valid).status_code == 200
    assert TestClient(app, client=(address, 50001)).get("/v1/jobs").status_code == 401
    elsewhere = TestClient(app, client=(f"{address}-b", 50000), headers=wrong)
    assert elsewhere.get("/v1/jobs").status_code == 401
