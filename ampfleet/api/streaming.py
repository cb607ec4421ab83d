"""Server-Sent Events: framing, and a poll loop that turns database rows into a stream.

Streams poll the database (the single source of truth) rather than a message bus, so any
API process can serve any stream and a reconnecting client resumes exactly where it left
off via `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

SSE_MEDIA_TYPE = "text/event-stream"
HEARTBEAT_S = 15.0


def stream_response_doc(description: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI for a 200 that is JSON, or an event stream when the client asks for one."""
    return {
        200: {
            "description": description,
            "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
        }
    }


def streaming_response(frames: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        frames,
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def wants_stream(accept: str | None) -> bool:
    return bool(accept) and SSE_MEDIA_TYPE in (accept or "")


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    payload = json.dumps(data, default=str, separators=(",", ":"))
    lines.append(f"data: {payload}")
    return ("\n".join(lines) + "\n\n").encode()


async def poll_stream(
    step: Callable[[], tuple[list[bytes], bool]], poll_s: float
) -> AsyncIterator[bytes]:
    """Calls `step` (blocking; run in a thread) until it says the stream is over, yielding
    its frames, and a comment line now and then so idle connections stay open."""
    last_sent = time.monotonic()
    while True:
        frames, finished = await run_in_threadpool(step)
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
