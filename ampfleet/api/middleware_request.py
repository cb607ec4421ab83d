"""Request ids and access logs: every request gets an id (the client's X-Request-ID when it
is sane, else a new one), echoed in the response and present on every log line; each request
is counted under the route it matched."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampfleet.api.observability import http_metrics
from ampfleet.api.options import path_template
from ampfleet.core.logs import request_id

log = logging.getLogger("ampfleet.access")
SANE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        rid = incoming if SANE_ID.match(incoming) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        root_path = scope.get("root_path", "")
        status = 500
        stream = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, stream
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.setdefault("headers", [])
                stream = any(
                    name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                    for name, value in headers
                )
                headers.append((b"x-request-id", rid.encode()))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            http_metrics.observe(
                scope["method"], route_label(scope, root_path), status, elapsed, stream=stream
            )
            log.info(
                "%s %s %s",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
            request_id.reset(token)


def route_label(scope: Scope, root_path: str) -> str:
    """The route template a request matched: an API route's path, `<mount>/{path}` for the
    console's files, the fixed path of the docs; `unmatched` only for what nothing served."""
    route = getattr(scope.get("route"), "path", None)
    if route:
        return str(route)
    mounted = scope.get("root_path", "")
    if mounted != root_path:  # a Mount matched and moved its prefix into root_path
        return f"{mounted.removeprefix(root_path)}/{{path}}"
    if "endpoint" in scope:  # a plain route (the OpenAPI document, the docs): fixed paths
        return str(scope["path"])
    # OPTIONS (ours or a CORS preflight) and 405s run no route, but are about one.
    return path_template(scope) or "unmatched"
