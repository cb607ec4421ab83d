"""Server-Sent Events: decoding, typed frames, and a stream flow that survives dropped
connections by reconnecting with `Last-Event-ID` (the id of the last frame it delivered).
A stream the server ends with an `error` frame is not reconnected: it raises that error, as
the response to a reconnection would (a revoked key's stream ends so, and it would be a 401)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from ampfleet.sdk.errors import ApiError, ConnectionFailed, StreamDisconnected, error_from_response
from ampfleet.sdk.models import JobFrame, LogLine, ProgressFrame, job_frame_adapter
from ampfleet.sdk.protocol import READ_LINE, Flow, Item, IterFlow, Sleep

T = TypeVar("T")

SSE_MEDIA_TYPE = "text/event-stream"
JOB_FRAME_KINDS = frozenset({"state", "event", "progress", "metrics", "end"})
# The HTTP status each error code of the envelope comes with, for the error frames of a
# stream (which has already answered 200).
STATUS_OF_ERROR_CODE = {
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "validation_error": 422,
    "too_many_requests": 429,
    "service_unavailable": 503,
}


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None


class SseDecoder:
    """Lines in, events out (the WHATWG event-stream format)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None  # a comment: the server's keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def resumable_stream(
    open_stream: Callable[[str | None], Flow[httpx.Response]],
    convert: Callable[[ServerSentEvent], Iterable[T]],
    last_event_id: str | None,
    max_reconnects: int,
) -> IterFlow[T]:
    """Yields `convert(event)` for every event until the `end` event. A broken connection,
    or one closed before `end`, is reopened from the last event id, after a pause that
    doubles with each failure in a row; `max_reconnects` failures in a row give up. A
    stream that cannot be opened the first time raises at once, as every other call does:
    there is nothing yet to resume, and a wrong address should say so now (it took 15.5 s
    of pauses before)."""
    failures = 0
    opened = False
    while True:
        try:
            yield from open_stream(last_event_id)
            opened = True
            decoder = SseDecoder()
            while (line := (yield READ_LINE)) is not None:
                event = decoder.feed(line)
                if event is None:
                    continue
                if event.event == "error":
                    raise error_from_frame(event)
                failures = 0
                last_event_id = event.id or last_event_id
                for item in convert(event):
                    yield Item(item)
                if event.event == "end":
                    return
            problem = "the server closed the stream before its end"
        except ConnectionFailed as exc:
            if not opened:
                raise
            problem = str(exc)
        failures += 1
        if failures > max_reconnects:
            raise StreamDisconnected(
                f"{problem} (gave up after {max_reconnects} reconnects)", last_event_id
            )
        yield Sleep(min(0.5 * 2 ** (failures - 1), 8.0))


def error_from_frame(event: ServerSentEvent) -> ApiError:
    """The exception of an `error` frame, whose data is the error envelope."""
    try:
        data = json.loads(event.data)
    except json.JSONDecodeError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    status = STATUS_OF_ERROR_CODE.get(code, 500) if isinstance(code, str) else 500
    headers = {"Content-Type": "application/json"}
    return error_from_response(httpx.Response(status, headers=headers, content=event.data))


class JobFrames:
    """A job stream's events as typed frames. A reconnection makes the server send its
    progress snapshot again; a snapshot equal to the last one delivered is dropped."""

    def __init__(self) -> None:
        self._progress: tuple[object, ...] | None = None

    def __call__(self, event: ServerSentEvent) -> list[JobFrame]:
        if event.event not in JOB_FRAME_KINDS:
            return []  # a kind this SDK does not know yet
        data = json.loads(event.data)
        payload = {"event": data} if event.event in ("state", "event") else data
        frame = job_frame_adapter.validate_python({**payload, "kind": event.event, "id": event.id})
        if isinstance(frame, ProgressFrame):
            snapshot = (frame.state, frame.step, frame.total_steps)
            if snapshot == self._progress:
                return []
            self._progress = snapshot
        return [frame]


def log_lines(event: ServerSentEvent) -> list[LogLine]:
    if event.event != "logs":
        return []
    return [LogLine.model_validate(line) for line in json.loads(event.data)["lines"]]
