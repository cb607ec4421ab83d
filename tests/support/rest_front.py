"""An HTTP server on a unix socket that stands where slurmrestd would, in a thread of the test.

It records every request (method, path, headers) and does what the test's `policy` says
with it: pass it on to the real slurmrestd behind it (without the JWT headers: the harness's
slurmrestd uses local auth, and 22.05's controller has no JWT plugin to check a token),
answer it itself (a 401, say), pass it on and then act before answering (kill the scheduler
that asked, which then never hears the answer), or answer so slowly that it never ends (a
status line one byte every few seconds: no client read timeout ever fires). Stopped, every
connection with it, at the end of the `with`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

TRICKLE_EVERY_S = 2.0
JWT_HEADERS = ("x-slurm-user-name", "x-slurm-user-token")


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardThen:
    """Pass it on, then run `then` and drop the connection unanswered."""

    then: Callable[[], None]


FORWARD = "forward"
TRICKLE = "trickle"
Action = str | Reply | ForwardThen
Policy = Callable[[Seen], Action]


class RestFront:
    def __init__(self, socket_path: Path, upstream: Path | None = None) -> None:
        self.socket_path = socket_path
        self.upstream = upstream
        self.policy: Policy = lambda _seen: FORWARD
        self.seen: list[Seen] = []
        self.stopping = threading.Event()
        self._server = _Server(str(socket_path), _Handler)
        self._server.front = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"unix:{self.socket_path}"

    def start(self) -> RestFront:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self.socket_path.unlink(missing_ok=True)

    def forward(self, seen: Seen, body: bytes) -> httpx.Response:
        if self.upstream is None:
            raise RuntimeError("no slurmrestd behind this front")
        headers = {k: v for k, v in seen.headers.items() if k.lower() not in JWT_HEADERS}
        headers.pop("host", None)
        transport = httpx.HTTPTransport(uds=str(self.upstream))
        with httpx.Client(transport=transport, base_url="http://slurmrestd", timeout=30) as http:
            return http.request(seen.method, seen.path, content=body, headers=headers)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    front: RestFront


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads `seen`."""

    def _any(self) -> None:
        front = self.server.front
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        front.seen.append(seen)
        action = front.policy(seen)
        if isinstance(action, Reply):
            self._answer(action.status, json.dumps(action.body).encode())
        elif isinstance(action, ForwardThen):
            front.forward(seen, body)
            action.then()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        elif action == TRICKLE:
            self._trickle()
        else:
            answer = front.forward(seen, body)
            self._answer(answer.status_code, answer.content)

    do_GET = do_POST = do_DELETE = _any  # noqa: N815 - BaseHTTPRequestHandler's names

    def _answer(self, status: int, content: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def _trickle(self) -> None:
        self.close_connection = True
        for byte in b"HTTP/1.1 200 OK\r\n" * 1000:
            if self.server.front.stopping.wait(TRICKLE_EVERY_S):
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return


@contextlib.contextmanager
def rest_front(socket_path: Path, upstream: Path | None = None) -> Iterator[RestFront]:
    front = RestFront(socket_path, upstream).start()
    try:
        yield front
    finally:
        front.stop()
