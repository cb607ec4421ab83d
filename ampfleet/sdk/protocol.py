"""The SDK's operations are written once, as generators that say which I/O they need.

A flow yields a `Request` (and is sent the `httpx.Response` back), a `Sleep`, `READ_LINE`
(and is sent the next line of the stream it opened last, or None at its end) or `READ_CHUNK`
(the next bytes of that stream, for downloads; None at its end); an iterating
flow also yields `Item`s for its caller. `Client` runs flows with blocking I/O and
`AsyncClient` with async I/O, so retries, paging, polling and stream resumption are written
once, in the flows (the pattern of httpx's own auth flows). A connection failure is thrown
into the flow as `ConnectionFailed`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeAlias, TypeVar

import httpx

from ampfleet.sdk.errors import ConnectionFailed

T = TypeVar("T")
Query: TypeAlias = tuple[tuple[str, str], ...]
# A live stream sends a keep-alive comment every 15 s at the least; silence past this is a
# dead connection, which the stream flow resumes.
STREAM_READ_TIMEOUT_S = 60.0


UPLOAD_CHUNK = 1 << 20


@dataclass(frozen=True)
class Upload:
    """A file sent as the request body, read a chunk at a time (never whole in memory);
    `on_progress` hears the bytes sent so far."""

    path: Path
    on_progress: Callable[[int], None] | None = None

    def chunks(self) -> Iterator[bytes]:
        sent = 0
        with self.path.open("rb") as source:
            while chunk := source.read(UPLOAD_CHUNK):
                sent += len(chunk)
                yield chunk
                if self.on_progress is not None:
                    self.on_progress(sent)

    async def achunks(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks():  # local file reads: short, and the loop stays responsive
            yield chunk


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: Query = ()
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False
    upload: Upload | None = None

    def build(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        timeout = http.timeout
        if self.stream and timeout.read is not None:
            timeout = httpx.Timeout(
                connect=timeout.connect,
                read=max(timeout.read, STREAM_READ_TIMEOUT_S),
                write=timeout.write,
                pool=timeout.pool,
            )
        headers, content = dict(self.headers), None
        if self.upload is not None:
            # A declared length: the server refuses an upload over its limit before reading it.
            headers["Content-Length"] = str(self.upload.path.stat().st_size)
            headers.setdefault("Content-Type", "application/octet-stream")
            asynchronous = isinstance(http, httpx.AsyncClient)
            content = self.upload.achunks() if asynchronous else self.upload.chunks()
        return http.build_request(
            self.method,
            self.path,
            params=self.params or None,
            json=self.json,
            content=content,
            headers=headers or None,
            timeout=timeout,
        )


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class ReadLine:
    pass


READ_LINE = ReadLine()


@dataclass(frozen=True)
class ReadChunk:
    pass


READ_CHUNK = ReadChunk()
# Bytes a download reads at a time: few round trips through the flow, little memory.
DOWNLOAD_CHUNK = 1 << 20


@dataclass(frozen=True)
class Item(Generic[T]):
    value: T


Step: TypeAlias = Request | Sleep | ReadLine | ReadChunk
Flow: TypeAlias = Generator[Step, Any, T]
IterFlow: TypeAlias = Generator[Step | Item[T], Any, None]


def query(**values: object) -> Query:
    """Query parameters without the Nones; a list or tuple value repeats its name."""
    return tuple(
        (name, str(item))
        for name, value in values.items()
        for item in (value if isinstance(value, list | tuple) else [value])
        if item is not None
    )


def connection_failed(exc: httpx.TransportError) -> ConnectionFailed:
    try:
        where = f"{exc.request.method} {exc.request.url}"
    except RuntimeError:  # raised before a request was bound to it
        where = "the API"
    verb = "cannot reach" if isinstance(exc, httpx.ConnectError) else "connection failed:"
    error = ConnectionFailed(f"{verb} {where}: {exc or type(exc).__name__}")
    error.__cause__ = exc
    return error


class Stepper:
    """Advances a flow: what it needs next, with the previous answer (or failure) sent in."""

    def __init__(self, flow: Generator[Any, Any, Any]) -> None:
        self.flow = flow
        self.value: Any = None  # what the flow returned, once it is done
        self._answer: Any = None
        self._error: ConnectionFailed | None = None

    def next(self) -> Step | Item[Any] | None:
        """The flow's next step, or None when it has finished."""
        answer, error = self._answer, self._error
        self._answer = self._error = None
        try:
            step: Step | Item[Any] = self.flow.throw(error) if error else self.flow.send(answer)
        except StopIteration as stop:
            self.value = stop.value
            return None
        return step

    def answer(self, value: Any) -> None:
        self._answer = value

    def fail(self, exc: httpx.TransportError) -> None:
        self._error = connection_failed(exc)
