"""Server-Sent Events: framing, the one parser of stream cursors, and a poll loop that turns
database rows into a stream.

Streams poll the database (the single source of truth) rather than a message bus, so any
API process can serve any stream and a reconnecting client resumes exactly where it left
off via `Last-Event-ID`. A stream is long-lived and cheap to open, so it must not tie up
what every request needs: it holds no database connection between polls (each poll opens
and closes a session of its own), a key holds a bounded number of streams open on one API
process, and a stream re-checks its key now and then, so a revoked key loses its streams.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.concurrency import run_in_threadpool

from ampfleet.api.auth import Principal, key_still_valid
from ampfleet.api.bounds import MAX_ID
from ampfleet.api.errors import TooManyRequestsError, UnprocessableError
from ampfleet.core.settings import get_settings

SSE_MEDIA_TYPE = "text/event-stream"
HEARTBEAT_S = 15.0
STREAM_FULL_RETRY_AFTER_S = 5
# How long an EventSource waits before it reconnects after a dropped connection.
RECONNECT_MS = 3000
RETRY_FIELD = f"retry: {RECONNECT_MS}\n".encode()
# ASCII digits only: str.isdigit() also holds for '²', which int() refuses.
CURSOR_PART = re.compile(r"[0-9]{1,19}")
# A poll that cannot reach the database now is tried again at the next one.
TRANSIENT_DATABASE_ERRORS = (OperationalError, InterfaceError, PoolTimeoutError)
log = logging.getLogger(__name__)

Step = Callable[[], tuple[list[bytes], bool]]


def stream_response_doc(description: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI for a 200 that is JSON, or an event stream when the client asks for one."""
    return {
        200: {
            "description": description,
            "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
        }
    }


def wants_stream(accept: str | None) -> bool:
    return bool(accept) and SSE_MEDIA_TYPE in (accept or "")


def parse_cursor(last_event_id: str | None, *names: str) -> tuple[int, ...] | None:
    """The numbers of a `Last-Event-ID` made of `names` joined by ':', each an id as the
    database holds it; None for no (or an empty) header. Anything else is a 422."""
    if not last_event_id:
        return None
    parts = last_event_id.split(":")
    if len(parts) == len(names) and all(CURSOR_PART.fullmatch(part) for part in parts):
        numbers = tuple(int(part) for part in parts)
        if max(numbers) <= MAX_ID:
            return numbers
    expected = ":".join(f"<{name}>" for name in names)
    raise UnprocessableError.for_field(
        "Last-Event-ID", f"expected '{expected}' from an earlier frame (ids up to {MAX_ID})"
    )


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    payload = json.dumps(data, default=str, separators=(",", ":"))
    lines.append(f"data: {payload}")
    return ("\n".join(lines) + "\n\n").encode()


class StreamSlots:
    """How many live streams each key holds open in this process."""

    def __init__(self) -> None:
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, key_id: str, limit: int) -> bool:
        with self._lock:
            if self._open[key_id] >= limit:
                return False
            self._open[key_id] += 1
            return True

    def give_back(self, key_id: str) -> None:
        with self._lock:
            self._open[key_id] -= 1
            if self._open[key_id] <= 0:
                del self._open[key_id]

    def held(self, key_id: str) -> int:
        with self._lock:
            return self._open[key_id]


stream_slots = StreamSlots()


class _Slot:
    """One key's slot, given back exactly once however the stream ends."""

    def __init__(self, key_id: str) -> None:
        self._key_id: str | None = key_id

    def give_back(self) -> None:
        key_id, self._key_id = self._key_id, None
        if key_id is not None:
            stream_slots.give_back(key_id)


def open_stream(principal: Principal, step: Step) -> StreamingResponse:
    """A live stream of what `step` (blocking; run in a thread) returns, poll after poll,
    for as long as `principal`'s key stays valid. 429 when the key has its share open."""
    settings = get_settings()
    if not stream_slots.take(principal.key_id, settings.max_streams_per_key):
        raise TooManyRequestsError(
            f"this key already has {settings.max_streams_per_key} live streams open on this "
            "server; close one first",
            retry_after_s=STREAM_FULL_RETRY_AFTER_S,
        )
    slot = _Slot(principal.key_id)
    frames = _poll(step, principal, slot, settings.stream_poll_s, settings.stream_key_recheck_s)
    # The generator gives its slot back when it ends; this covers one that never started.
    weakref.finalize(frames, slot.give_back)
    return StreamingResponse(
        frames,
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _poll(
    step: Step, principal: Principal, slot: _Slot, poll_s: float, recheck_s: float
) -> AsyncIterator[bytes]:
    """Yields `step`'s frames until it says the stream is over, a comment line now and
    then so idle connections stay open, and an `error` frame if the key stops being valid."""
    try:
        retry_pending = True
        last_sent = last_checked = time.monotonic()
        while True:
            if time.monotonic() - last_checked >= recheck_s:
                last_checked = time.monotonic()
                if await _revoked(principal):
                    yield _revoked_frame()
                    return
            try:
                frames, finished = await run_in_threadpool(step)
            except TRANSIENT_DATABASE_ERRORS as exc:
                log.warning("stream poll skipped: %s", exc)
                frames, finished = [], False
            if frames and retry_pending:
                # A field of the first event rather than a block of its own, which naive
                # readers would take for an event.
                frames = [RETRY_FIELD + frames[0], *frames[1:]]
                retry_pending = False
            for item in frames:
                yield item
            if frames:
                last_sent = time.monotonic()
            if finished:
                return
            if time.monotonic() - last_sent > HEARTBEAT_S:
                yield b": keep-alive\n\n"
                last_sent = time.monotonic()
            await asyncio.sleep(poll_s)
    finally:
        slot.give_back()


async def _revoked(principal: Principal) -> bool:
    try:
        return not await run_in_threadpool(key_still_valid, principal)
    except TRANSIENT_DATABASE_ERRORS as exc:
        log.warning("stream key check put off: %s", exc)  # a busy database revokes nothing
        return False


def _revoked_frame() -> bytes:
    message = "the API key has been revoked or changed; this stream has ended"
    return frame("error", {"error": {"code": "unauthorized", "message": message}})
