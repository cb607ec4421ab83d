"""Stream tokens lapse: after their lifetime, and with the key that asked for them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.api import stream_tokens
from tests.support.factories import job_spec


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_token_lapses_after_its_lifetime_and_with_its_key(
    app: FastAPI, make_key: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = {"Authorization": f"Bearer {make_key()}"}
    writer = {"Authorization": f"Bearer {make_key(role='write')}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        job = client.post("/v1/jobs", json=job_spec(), headers=writer).json()["id"]
        token = client.post(f"/v1/jobs/{job}/events/token", headers=writer).json()["token"]
        assert client.get(f"/v1/jobs/{job}/events", params={"token": token}).status_code == 200

        monkeypatch.setattr(stream_tokens, "STREAM_TOKEN_TTL_S", -1)  # issued already expired
        lapsed = client.post(f"/v1/jobs/{job}/events/token", headers=writer).json()["token"]
        expired = client.get(f"/v1/jobs/{job}/events", params={"token": lapsed})
        assert expired.status_code == 401
        assert "expired" in expired.json()["error"]["message"]

        keys = client.get("/v1/keys", headers=admin).json()["items"]
        key_id = next(k["id"] for k in keys if k["role"] == "write")
        assert client.delete(f"/v1/keys/{key_id}", headers=admin).status_code == 204
        revoked = client.get(f"/v1/jobs/{job}/events", params={"token": token})
        assert revoked.status_code == 401
        assert "revoked" in revoked.json()["error"]["message"]
