"""Idempotency-Key per the IETF draft: 409 with Retry-After while the first request with the
key is in flight, 200 for a replay (documented), keys free again after their lifetime."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from ampfleet.api.jobs import idempotency
from ampfleet.core.db import session_scope
from ampfleet.core.models import Job
from ampfleet.core.settings import get_settings
from tests.support.factories import job_spec


def test_a_request_while_the_first_is_in_flight_gets_409_then_the_replay_200(
    client: TestClient,
) -> None:
    headers = {"Idempotency-Key": "deploy-7"}
    with session_scope() as session, idempotency.claim(session, "default", "deploy-7"):
        # What the first request holds until its transaction ends.
        busy = client.post("/v1/jobs", json=job_spec(), headers=headers)
    assert busy.status_code == 409, busy.text
    assert busy.headers["Retry-After"] == "1"
    assert busy.json()["error"]["code"] == "idempotency_key_in_flight"
    first = client.post("/v1/jobs", json=job_spec(), headers=headers)
    replay = client.post("/v1/jobs", json=job_spec(), headers=headers)
    assert (first.status_code, replay.status_code) == (202, 200)
    assert replay.json()["id"] == first.json()["id"]
    assert replay.headers["Location"] == f"/v1/jobs/{first.json()['id']}"
    other = client.post("/v1/jobs", json=job_spec(), headers={"Idempotency-Key": "deploy-8"})
    assert other.status_code == 202  # another key is not held by the first


def test_a_key_is_free_again_after_its_lifetime(client: TestClient) -> None:
    headers = {"Idempotency-Key": "nightly"}
    first = client.post("/v1/jobs", json=job_spec(), headers=headers).json()
    with session_scope() as session:
        row = session.get(Job, first["id"])
        assert row is not None
        row.created_at -= timedelta(seconds=get_settings().idempotency_key_ttl_s + 1)
    again = client.post("/v1/jobs", json=job_spec(stop={"max_steps": 9}), headers=headers)
    assert again.status_code == 202, again.text  # another body too: the old key is gone
    assert again.json()["id"] != first["id"]
    replay = client.post("/v1/jobs", json=job_spec(stop={"max_steps": 9}), headers=headers)
    assert (replay.status_code, replay.json()["id"]) == (200, again.json()["id"])


def test_the_replay_and_the_conflict_are_documented(client: TestClient) -> None:
    answers = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]["responses"]
    assert {"200", "202", "409"} <= answers.keys()
    assert answers["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobOut")
    assert "Idempotency-Key" in answers["200"]["description"]
