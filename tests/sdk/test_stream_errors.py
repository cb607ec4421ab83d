"""A live stream that the server ends with an `error` frame raises that error in the SDK
at once, without reconnecting (a revoked key's reconnection would only be refused)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import pytest
from fastapi.testclient import TestClient

from ampfleet import Client
from ampfleet.core.db import session_scope
from ampfleet.core.models import LogLine
from ampfleet.sdk import StateFrame, Unauthorized
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.live_api import serving

FRAMES_BEFORE_THE_END = 10


@pytest.fixture
def quick_recheck(backend: str) -> Iterator[None]:
    with environment({"AMPFLEET_STREAM_KEY_RECHECK_S": "0.1", "AMPFLEET_STREAM_POLL_S": "0.05"}):
        yield


@pytest.mark.parametrize("stream", ["events", "logs"])
def test_a_revoked_keys_stream_raises_unauthorized(quick_recheck, make_key, stream: str) -> None:
    from ampfleet.api.app import create_app

    app = create_app()
    admin = TestClient(app, headers={"Authorization": f"Bearer {make_key()}"})
    created = admin.post("/v1/keys", json={"project": "alpha", "role": "write"}).json()
    job_id = admin.post("/v1/jobs", json=job_spec(project="alpha")).json()["id"]
    with serving(app) as base_url, Client(base_url, created["key"]) as client:
        if stream == "events":
            frames = client.stream_events(job_id)
            assert isinstance(next(frames), StateFrame)  # the stream is open
        else:
            with session_scope() as session:
                session.add(LogLine(job_id=job_id, attempt=1, rank=0, stream="stdout", line="hi"))
            frames = client.logs(job_id, follow=True)
            assert next(frames).line == "hi"  # the stream is open
        assert admin.delete(f"/v1/keys/{created['id']}").status_code == 204
        with pytest.raises(Unauthorized) as raised:
            list(islice(frames, FRAMES_BEFORE_THE_END))  # a progress snapshot, then the error
    assert raised.value.status == 401
    assert raised.value.code == "unauthorized"
    # The frame's own message: the error was not that of a refused reconnection.
    assert "this stream has ended" in raised.value.message
