"""What one key's live streams may take: a bounded number open at once, and nothing once
the key is revoked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.live_api import events_until, serving

STREAMS = ("events", "logs")
REOPEN_TRIES = 100


def sse(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}


def queued_job(app: FastAPI, key: str) -> str:
    with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
        return str(client.post("/v1/jobs", json=job_spec()).json()["id"])


@pytest.fixture
def two_streams_per_key(backend: str) -> Iterator[None]:
    with environment({"AMPFLEET_MAX_STREAMS_PER_KEY": "2", "AMPFLEET_STREAM_POLL_S": "3600"}):
        yield


def test_a_key_holds_a_bounded_number_of_streams(two_streams_per_key, make_key) -> None:
    from ampfleet.api.app import create_app

    app = create_app()
    key, other = make_key("alpha", "write"), make_key("alpha", "write")
    job_id = queued_job(app, key)
    path = f"/v1/jobs/{job_id}/events"
    with serving(app) as base_url, httpx.Client(base_url=base_url, timeout=30) as http:
        first = http.send(http.build_request("GET", path, headers=sse(key)), stream=True)
        with (
            closing(first),
            http.stream("GET", f"/v1/jobs/{job_id}/logs", headers=sse(key)) as second,
        ):
            assert (first.status_code, second.status_code) == (200, 200)
            refused = http.get(path, headers=sse(key))
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "too_many_requests"
            assert int(refused.headers["Retry-After"]) >= 1
            with http.stream("GET", path, headers=sse(other)) as others:
                assert others.status_code == 200  # the bound is per key
            assert http.get(path, headers={"Authorization": f"Bearer {key}"}).status_code == 200
            first.close()  # a stream the client drops gives its place back
            for _ in range(REOPEN_TRIES):
                with http.stream("GET", path, headers=sse(key)) as again:
                    if again.status_code == 200:
                        assert events_until(again.iter_lines(), "progress")[-1] == "progress"
                        break
                time.sleep(0.05)
            else:
                pytest.fail("the dropped stream's place was never given back")


@pytest.fixture
def quick_recheck(backend: str) -> Iterator[None]:
    with environment({"AMPFLEET_STREAM_KEY_RECHECK_S": "0.1", "AMPFLEET_STREAM_POLL_S": "0.05"}):
        yield


@pytest.mark.parametrize("stream", STREAMS)
def test_a_revoked_keys_stream_ends(quick_recheck, make_key, stream: str) -> None:
    from ampfleet.api.app import create_app

    app = create_app()
    admin = TestClient(app, headers={"Authorization": f"Bearer {make_key()}"})
    created = admin.post("/v1/keys", json={"project": "alpha", "role": "write"}).json()
    job_id = queued_job(app, created["key"])
    with (
        serving(app) as base_url,
        httpx.Client(base_url=base_url, timeout=10) as http,  # heartbeats come every 15 s
        http.stream("GET", f"/v1/jobs/{job_id}/{stream}", headers=sse(created["key"])) as live,
    ):
        assert live.status_code == 200
        lines = live.iter_lines()
        if stream == "events":
            assert events_until(lines, "progress")[-1] == "progress"
        assert admin.delete(f"/v1/keys/{created['id']}").status_code == 204
        assert events_until(lines, "error")[-1] == "error"
        assert list(lines) == [
            'data: {"error":{"code":"unauthorized","message":"the API key '
            'has been revoked or changed; this stream has ended"}}',
            "",
        ]
