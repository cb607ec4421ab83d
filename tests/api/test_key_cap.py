"""A project holds at most AMPFLEET_MAX_KEYS_PER_PROJECT active keys, so a write key cannot
multiply every per-key cap by minting keys: past the cap POST /v1/keys is 409 in the error
envelope and makes nothing, revoking one frees a place, other projects are not counted, and
concurrent creates cannot overshoot it (the count is taken under a lock)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ampfleet.core.db import session_scope
from ampfleet.core.models import ApiKey
from tests.conftest import KeyFactory
from tests.support.env import environment

CAP = 4
RACERS = 16


@pytest.fixture
def capped(backend: str) -> Iterator[None]:
    with environment({"AMPFLEET_MAX_KEYS_PER_PROJECT": str(CAP)}):
        yield


def active_keys(project: str) -> int:
    with session_scope() as session:
        statement = select(func.count()).where(
            ApiKey.project == project, ApiKey.revoked_at.is_(None)
        )
        return session.scalar(statement) or 0


def writer_of(app: FastAPI, key: str) -> TestClient:
    return TestClient(
        app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {key}"}
    )


def test_a_write_key_cannot_mint_keys_past_the_project_s_cap(
    capped: None, app: FastAPI, make_key: KeyFactory, client: TestClient
) -> None:
    with writer_of(app, make_key("alpha", "write")) as writer:
        made = [writer.post("/v1/keys", json={"name": f"k{i}"}) for i in range(CAP - 1)]
        assert [response.status_code for response in made] == [201] * (CAP - 1)
        refused = writer.post("/v1/keys", json={"name": "one too many"})
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "conflict"
        assert "AMPFLEET_MAX_KEYS_PER_PROJECT=4" in error["message"]
        assert active_keys("alpha") == CAP
        # An admin counts against the same cap; another project has its own.
        assert client.post("/v1/keys", json={"project": "alpha"}).status_code == 409
        assert client.post("/v1/keys", json={"project": "beta"}).status_code == 201
        assert writer.delete(f"/v1/keys/{made[0].json()['id']}").status_code == 204
        assert writer.post("/v1/keys", json={"name": "in its place"}).status_code == 201
    assert active_keys("alpha") == CAP


def test_concurrent_creates_never_pass_the_cap(
    capped: None, app: FastAPI, make_key: KeyFactory
) -> None:
    start = threading.Barrier(RACERS, timeout=30)
    codes: list[int] = []
    with writer_of(app, make_key("alpha", "write")) as writer:

        def create() -> None:
            start.wait()
            codes.append(writer.post("/v1/keys", json={"name": "racer"}).status_code)

        threads = [threading.Thread(target=create) for _ in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    # 429s may come from the per-key in-flight cap; never a 5xx, never past the cap.
    assert Counter(codes)[201] == CAP - 1, codes
    assert set(codes) <= {201, 409, 429}, codes
    assert active_keys("alpha") == CAP
