"""The per-key cap on requests in flight in one API process (pure ASGI, before everything
that costs: a thread, a database connection, the key's look-up).

Why a cap and not only a rate: every admitted request runs its key check, its session and
its handler in the process's one threadpool (AnyIO's, 40 threads), draws on the one database
pool (AMPFLEET_DB_POOL_*) and shares the interpreter with every other request. 100 clients of
one key sending at once held all 40 threads and a pool's worth of connections; a fifth to a
quarter of their requests waited out the pool timeout (503), and another tenant's request
shared the interpreter with 40 busy threads (BENCHMARKS.md, "One key's burst and another
tenant"). Past AMPFLEET_MAX_REQUESTS_IN_FLIGHT_PER_KEY a key's request is answered 429 here,
so one key holds at most that many threads and connections, whatever it sends.

Keys are told apart by the credential presented (hashed, so no secret is kept), since
verifying it would take the thread and connection the cap protects: a wrong key is counted
on its own and then refused by the key check. A request counts until its response is
complete; a live stream (text/event-stream) until it opens, from when the per-key stream cap
(AMPFLEET_MAX_STREAMS_PER_KEY) bounds it.
"""

from __future__ import annotations

import hashlib
from collections import Counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampfleet.api.errors import error_response

IN_FLIGHT_RETRY_AFTER_S = 1
EVENT_STREAM = b"text/event-stream"


def presented_key(scope: Scope) -> bytes | None:
    """A digest of the API key the request presents (as `current_principal` reads it)."""
    bearer = header_key = None
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"bearer" and credentials:
                bearer = credentials
        elif name == b"x-api-key" and value:
            header_key = value
    presented = bearer or header_key
    return hashlib.sha256(presented).digest() if presented else None


class KeyInFlightLimitMiddleware:
    """At most `limit` requests of one key in flight in this process; 429 past it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        # Only the event loop's thread touches it (ASGI calls), so it needs no lock.
        self._in_flight: Counter[bytes] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = presented_key(scope) if scope["type"] == "http" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        if self._in_flight[key] >= self.limit:
            message = (
                f"this key already has {self.limit} requests in flight on this server; "
                "send the next one when one of them is answered"
            )
            headers = {"Retry-After": str(IN_FLIGHT_RETRY_AFTER_S)}
            await error_response(429, "too_many_requests", message, headers=headers)(
                scope, receive, send
            )
            return
        self._in_flight[key] += 1
        counted = True

        def done() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._in_flight[key] -= 1
                if self._in_flight[key] <= 0:
                    del self._in_flight[key]

        async def send_counted(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_event_stream(message):
                done()
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done()  # answered: what runs after the response (background tasks) is not

        try:
            await self.app(scope, receive, send_counted)
        finally:
            done()


def _is_event_stream(message: Message) -> bool:
    return any(
        name.lower() == b"content-type" and value.startswith(EVENT_STREAM)
        for name, value in message.get("headers", [])
    )
