"""Webhook deliveries in tests: `Receiver`, a local HTTP endpoint that records what is posted
to it, and `dispatch_all`, the scheduler's delivery pass run here as its loop would run it."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx

from ampfleet.core.settings import get_settings
from ampfleet.scheduler.webhook_dispatch import deliver_due


class Receiver:
    """A local HTTP endpoint that records what it receives and answers `codes` in turn."""

    def __init__(
        self,
        codes: list[int] | None = None,
        address: tuple[str, int] = ("127.0.0.1", 0),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.codes = list(codes or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.codes.pop(0) if receiver.codes else 200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                return

        self.server = HTTPServer(address, Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def dispatch_all(rounds: int = 1) -> None:
    import time

    with httpx.Client(timeout=5) as client:
        for _ in range(rounds):
            deliver_due(get_settings(), client)
            time.sleep(0.05)
