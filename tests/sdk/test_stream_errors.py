"""A live stream that the server ends with an `error` frame raises that error in the SDK
at once, without reconnecting (a revoked key's reconnection would only be refused). A stream
that cannot be opened at all raises at once too; one that was open reconnects."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

import pytest
from fastapi.testclient import TestClient

from ampfleet import Client
from ampfleet.core.db import session_scope
from ampfleet.core.models import LogLine
from ampfleet.sdk import ConnectionFailed, StateFrame, StreamDisconnected, Unauthorized
from ampfleet.sdk.protocol import READ_LINE, Flow, Sleep
from ampfleet.sdk.streams import log_lines, resumable_stream
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


def _opener(opens: list[bool]) -> Callable[[str | None], Flow[None]]:
    """Opens a stream once per entry of `opens`: True opens it, False is refused."""
    tries = iter(opens)

    def open_stream(_last_event_id: str | None) -> Flow[None]:
        if not next(tries):
            raise ConnectionFailed("cannot reach GET http://127.0.0.1:9/v1/jobs/x/logs")
        yield from ()

    return open_stream


def test_a_stream_that_cannot_be_opened_raises_at_once() -> None:
    flow = resumable_stream(_opener([False]), log_lines, None, max_reconnects=5)
    with pytest.raises(ConnectionFailed, match="cannot reach") as raised:
        next(flow)  # the first step: no pause before it gives up
    assert not isinstance(raised.value, StreamDisconnected)


def test_an_open_stream_that_breaks_reconnects_with_pauses_then_gives_up() -> None:
    flow = resumable_stream(_opener([True, False, False]), log_lines, None, max_reconnects=2)
    steps = [next(flow)]
    assert steps == [READ_LINE]
    steps.append(flow.send(None))  # the server closed the stream before its end
    steps.append(next(flow))  # the reopening is refused
    assert steps[1:] == [Sleep(0.5), Sleep(1.0)]
    with pytest.raises(StreamDisconnected, match="gave up after 2 reconnects"):
        next(flow)
