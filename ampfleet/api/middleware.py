"""Pure ASGI middleware: the request body limit (413) and the NUL-character guard (422),
both answering in the error envelope."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampfleet.api.errors import ErrorDetail, error_response


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
                await self._reject(scope, receive, send)
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
                    await self._reject(scope, receive, send)
                return
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except _BodyTooLargeError:
            if not replaced:
                await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"request body exceeds {self.max_bytes} bytes"
        headers = {"connection": "close"}
        await error_response(413, "payload_too_large", message, headers=headers)(
            scope, receive, send
        )


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
            await _refuse(scope, receive, send, "path")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        for name, value in parse_qsl(query, keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                await _refuse(scope, receive, send, name.replace("\x00", ""))
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
            await _refuse(scope, receive, send, field)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, field: str) -> None:
    message = "NUL characters are not allowed"
    detail = ErrorDetail(field=field, message=message, type="nul_character")
    summary = f"invalid request: {field}: {message}"
    await error_response(422, "validation_error", summary, [detail])(scope, receive, send)
