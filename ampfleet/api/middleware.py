"""Pure ASGI middleware: the request body limit (413) and the NUL-character guard (422),
both answering in the error envelope."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _BodyTooLargeError(Exception):
    pass


class BodySizeLimitMiddleware:
    """Refuses bodies over `max_bytes`, by Content-Length up front or by counting a stream."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._reject(send)
                return

        received = 0
        too_large = False
        replaced = False

        async def counting_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLargeError
            return message

        async def guarded_send(message: Message) -> None:
            # The framework turns an error while reading the body into its own 400; once we
            # know the body was too large, answer 413 instead of whatever it says.
            nonlocal replaced
            if too_large:
                if not replaced:
                    replaced = True
                    await self._reject(send)
                return
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except _BodyTooLargeError:
            if not replaced:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": {
                    "code": "payload_too_large",
                    "message": f"request body exceeds {self.max_bytes} bytes",
                    "details": [],
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _nul_path(value: object, path: str) -> str | None:
    """The dotted path of the first string (or key) holding a NUL character, if any."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return child
            if (found := _nul_path(item, child)) is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _nul_path(item, f"{path}.{index}" if path else str(index))) is not None:
                return found
    return None


class NulCharacterGuardMiddleware:
    """No text the API stores may contain NUL (PostgreSQL cannot hold it): a request with one
    in its path, query or JSON body is refused with 422 naming where, before any handler."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope["path"]:
            await _refuse(send, "path", "NUL characters are not allowed")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        for name, value in parse_qsl(query, keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                await _refuse(send, name.replace("\x00", ""), "NUL characters are not allowed")
                return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(chunks)
        if b"\x00" in body or b"\\u0000" in body:
            try:
                field = _nul_path(json.loads(body), "") or "body"
            except ValueError:
                field = "body"
            await _refuse(send, field, "NUL characters are not allowed")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(send: Send, field: str, message: str) -> None:
    body = json.dumps(
        {
            "error": {
                "code": "validation_error",
                "message": f"invalid request: {field}: {message}",
                "details": [{"field": field, "message": message, "type": "nul_character"}],
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
