"""The API app served by a real uvicorn on loopback, in this process: for tests that keep
responses open (live streams) or send requests at once, and then look at this process's
engines (their pools), which a separate API process would hide."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine

from ampfleet.core.db import get_engine, get_read_sessionmaker
from tests.support.fleet import free_port

START_TIMEOUT_S = 20.0


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Yields the base URL while uvicorn serves `app`; open streams are cut at the end."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="live-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)


def engines() -> list[Engine]:
    """Every engine the API's sessions draw from (SQLite reads have one of their own)."""
    read = get_read_sessionmaker().kw["bind"]
    return [get_engine()] if read is get_engine() else [get_engine(), read]


def checked_out() -> int:
    """Connections taken from the pools and not yet given back."""
    return sum(engine.pool.checkedout() for engine in engines())  # type: ignore[attr-defined]


def events_until(lines: Iterator[str], last: str, most: int = 100) -> list[str]:
    """The kinds of the events read off an SSE response's lines, up to the first `last`
    (or the end of the stream, or `most` events)."""
    kinds: list[str] = []
    for line in lines:
        if line.startswith("event: "):
            kinds.append(line.removeprefix("event: "))
            if kinds[-1] == last or len(kinds) >= most:
                break
    return kinds
