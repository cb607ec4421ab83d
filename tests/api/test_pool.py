"""The database connection pool under one key's load: a request holds one connection at a
time, an exhausted pool answers 503 with Retry-After (never 500), and a live stream holds
no connection between its polls."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import LogLine
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.live_api import checked_out, engines, events_until, serving

SIMULTANEOUS = 24


@pytest.fixture
def small_pool(backend: str) -> Iterator[None]:
    """One connection per engine, and a short wait for it."""
    values = {
        "AMPFLEET_DB_POOL_SIZE": "1",
        "AMPFLEET_DB_POOL_MAX_OVERFLOW": "0",
        "AMPFLEET_DB_POOL_TIMEOUT_S": "0.5",
        "AMPFLEET_STREAM_POLL_S": "3600",  # one poll when a stream opens, then quiet
    }
    with environment(values):
        yield


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_every_request_needs_only_one_connection(small_pool, make_key) -> None:
    """With one connection in the pool, a request that took a second one while holding the
    first (the key check's and the handler's) could never finish."""
    from ampfleet.api.app import create_app

    headers = bearer(make_key("alpha", "write"))
    with TestClient(create_app(), raise_server_exceptions=False, headers=headers) as client:
        submitted = client.post("/v1/jobs", json=job_spec(), headers={"Idempotency-Key": "one"})
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        again = client.post("/v1/jobs", json=job_spec(), headers={"Idempotency-Key": "one"})
        assert again.status_code == 200, again.text
        for path in ("/v1/jobs", f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events", "/v1/queue"):
            assert client.get(path).status_code == 200, path
        assert client.get(f"/v1/jobs/{job_id}/logs").status_code == 200
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    assert checked_out() == 0


def test_an_exhausted_pool_answers_503_with_retry_after(small_pool, make_key) -> None:
    from ampfleet.api.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False, headers=bearer(make_key())) as c:
        held = [engine.connect() for engine in engines()]
        try:
            busy = c.get("/v1/jobs")
        finally:
            for connection in held:
                connection.close()
        assert busy.status_code == 503, busy.text
        assert busy.json()["error"]["code"] == "service_unavailable"
        assert int(busy.headers["Retry-After"]) >= 1
        assert c.get("/v1/jobs").status_code == 200  # and it recovers once one is free


def test_simultaneous_requests_from_one_key_get_200_or_503(small_pool, make_key) -> None:
    from ampfleet.api.app import create_app

    key, other = make_key("alpha", "read"), make_key("beta", "read")
    # The per-key cap on requests in flight would answer most of them 429 before the pool.
    with environment({"AMPFLEET_MAX_REQUESTS_IN_FLIGHT_PER_KEY": str(SIMULTANEOUS)}):
        app = create_app()
    with serving(app) as base_url, httpx.Client(base_url=base_url, timeout=30) as http:

        def get(_: int) -> int:
            return http.get("/v1/jobs", headers=bearer(key)).status_code

        with ThreadPoolExecutor(SIMULTANEOUS) as pool:
            codes = list(pool.map(get, range(SIMULTANEOUS)))
        assert set(codes) <= {200, 503}, codes
        assert 200 in codes
        assert http.get("/v1/jobs", headers=bearer(other)).status_code == 200
    assert checked_out() == 0


def test_live_streams_hold_no_connection_between_polls(small_pool, make_key) -> None:
    from ampfleet.api.app import create_app

    app = create_app()
    key = make_key("alpha", "write")
    with TestClient(app, headers=bearer(key)) as client:
        job_id = client.post("/v1/jobs", json=job_spec()).json()["id"]
    with session_scope() as session:
        session.add(LogLine(job_id=job_id, attempt=1, rank=0, stream="stdout", line="hello"))
    sse = {**bearer(key), "Accept": "text/event-stream"}
    with (
        serving(app) as base_url,
        httpx.Client(base_url=base_url, timeout=30) as http,
        http.stream("GET", f"/v1/jobs/{job_id}/events", headers=sse) as events,
        http.stream("GET", f"/v1/jobs/{job_id}/logs", headers=sse) as logs,
    ):
        # Each stream's first poll ends with these frames; the next is an hour away.
        assert events_until(events.iter_lines(), "progress") == ["state", "progress"]
        assert events_until(logs.iter_lines(), "logs") == ["logs"]
        assert checked_out() == 0
        listed = http.get("/v1/jobs", headers=bearer(key))  # the pool's one connection
        assert [job["id"] for job in listed.json()["items"]] == [job_id]
