"""What the API remembers between requests (keys that verified, the node list admission
reads) never lets a revoked key in on the process that revoked it, never serves a wrong
secret, and never refuses a job that a node registered a moment ago could run."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from ampfleet.api.key_cache import verified_keys
from ampfleet.core.db import session_scope
from ampfleet.core.models import ApiKey
from tests.conftest import KeyFactory
from tests.support.factories import add_node, job_spec


def test_a_key_revoked_here_is_refused_at_the_next_request(
    app: FastAPI, make_key: KeyFactory
) -> None:
    admin = TestClient(app, headers={"Authorization": f"Bearer {make_key()}"})
    doomed_key = make_key("default", "write")
    doomed = TestClient(app, headers={"Authorization": f"Bearer {doomed_key}"})
    assert doomed.get("/v1/jobs").status_code == 200  # verified, and remembered
    assert verified_keys.get(doomed_key) is not None
    prefix = doomed_key.split("_")[1]
    with session_scope() as session:
        key_id = session.scalars(select(ApiKey.id).where(ApiKey.prefix == prefix)).one()
    assert admin.delete(f"/v1/keys/{key_id}").status_code == 204
    refused = doomed.get("/v1/jobs")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"


def test_a_wrong_secret_for_a_remembered_prefix_is_refused(
    app: FastAPI, make_key: KeyFactory
) -> None:
    key = make_key("default", "write")
    assert TestClient(app, headers={"Authorization": f"Bearer {key}"}).get("/v1/jobs").is_success
    forged = key[:-4] + ("aaaa" if not key.endswith("aaaa") else "bbbb")
    response = TestClient(app, headers={"Authorization": f"Bearer {forged}"}).get("/v1/jobs")
    assert response.status_code == 401


def test_a_node_registered_after_admission_read_the_nodes_is_not_refused(
    client: TestClient,
) -> None:
    add_node("small", slots=1)
    big = job_spec(resources={"nodes": 1, "procs_per_node": 4})
    refused = client.post("/v1/jobs", json=big)
    assert refused.status_code == 422, refused.text  # the node list is now remembered
    add_node("large", slots=8)
    accepted = client.post("/v1/jobs", json=big)
    assert accepted.status_code == 202, accepted.text
