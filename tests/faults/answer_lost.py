"""A TCP proxy in front of the API that loses the first answer: as its first bytes arrive
(the request's transaction has committed, the answer is written), the proxy kills the API
process and closes the client's connection, forwarding none of it. Later connections pass
through to whatever listens on the API's port then."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

RECEIVE_BYTES = 65536


class AnswerLost:
    def __init__(self, upstream_port: int, kill: Callable[[], None]) -> None:
        """`kill`: kills the API process and returns once it is dead."""
        self.upstream_port = upstream_port
        self.kill = kill
        self.lost = b""
        """What the API had answered the first connection when it was killed."""
        self._first = True
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            first, self._first = self._first, False
            threading.Thread(target=_pump, args=(downstream, upstream), daemon=True).start()
            answers = self._lose if first else _pump
            threading.Thread(target=answers, args=(upstream, downstream), daemon=True).start()

    def _lose(self, upstream: socket.socket, downstream: socket.socket) -> None:
        try:
            self.lost = upstream.recv(RECEIVE_BYTES)
            self.kill()
        finally:
            _close(upstream, downstream)


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(RECEIVE_BYTES):
            target.sendall(data)
    except OSError:
        pass
    finally:
        _close(source, target)


def _close(*sides: socket.socket) -> None:
    for side in sides:
        with contextlib.suppress(OSError):
            side.shutdown(socket.SHUT_RDWR)
        side.close()
