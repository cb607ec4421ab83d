"""A TCP proxy in front of the API that breaks its first connection part-way through the
answer: a real dropped connection, for the stream's resumption to recover from."""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttingProxy:
    def __init__(self, upstream_port: int, cut_after_bytes: int) -> None:
        self.upstream_port = upstream_port
        self.cut_after_bytes = cut_after_bytes
        self.connections = 0
        self.requests: list[bytearray] = []
        """What each connection's client sent (its request head), in order."""
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
            self.connections += 1
            cut = self.cut_after_bytes if self.connections == 1 else None
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            sent = bytearray()
            self.requests.append(sent)
            threading.Thread(
                target=_pump, args=(downstream, upstream, None, sent), daemon=True
            ).start()
            threading.Thread(target=_pump, args=(upstream, downstream, cut), daemon=True).start()


def _pump(
    source: socket.socket,
    target: socket.socket,
    cut: int | None,
    keep: bytearray | None = None,
) -> None:
    """Copies bytes one way; after `cut` bytes, closes both sides; `keep` gets a copy."""
    sent = 0
    try:
        while data := source.recv(4096):
            if keep is not None:
                keep += data
            if cut is not None and sent + len(data) >= cut:
                target.sendall(data[: cut - sent])
                break
            target.sendall(data)
            sent += len(data)
    except OSError:
        pass
    finally:
        for side in (source, target):
            with contextlib.suppress(OSError):
                side.shutdown(socket.SHUT_RDWR)
            side.close()
