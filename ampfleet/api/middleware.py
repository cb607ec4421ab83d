"""Pure ASGI middleware: the request body limit (413), the JSON nesting limit and the
NUL-character guard (422), all answering in the error envelope.

Upload routes (`UPLOAD_PATHS`) take an archive's bytes, not JSON, and stream them with a limit
of their own: these three let them through untouched (read whole, a 100 MiB body would sit in
memory, and any binary file holds NUL bytes)."""

from __future__ import annotations

import itertools
import json
import operator
import re
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampfleet.api.errors import ErrorDetail, error_response

UPLOAD_PATHS = frozenset({"/v1/bundles", "/v1/datasets"})


def _is_upload(scope: Scope) -> bool:
    return scope["method"] == "POST" and scope["path"].rstrip("/") in UPLOAD_PATHS


class _BodyTooLargeError(Exception):
    pass


class BodySizeLimitMiddleware:
    """Refuses bodies over `max_bytes`, by Content-Length up front or by counting a stream."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _is_upload(scope):
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


_BODY_METHODS = ("POST", "PUT", "PATCH")


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then the connection's messages."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x02\x00\x02\x00")


def json_depth(body: bytes) -> int:
    """How deep arrays and objects nest in `body`, counted without parsing it: parsing (and
    everything that later walks the parsed value) recurses once per level."""
    steps = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS).translate(_BRACKET_STEPS)
    # An opening bracket steps 2 and a closing one 0, so after k brackets the depth is the
    # running sum minus k: C-level iterators, no Python loop over the body.
    return max(map(operator.sub, itertools.accumulate(steps), itertools.count(1)), default=0)


class JsonDepthLimitMiddleware:
    """Refuses a body nested deeper than `max_depth` with 422, before anything parses it
    (the NUL guard and the framework parse it; validation and serialisation recurse)."""

    def __init__(self, app: ASGIApp, max_depth: int) -> None:
        self.app = app
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS or _is_upload(scope):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if json_depth(body) > self.max_depth:
            message = f"JSON nested deeper than {self.max_depth} levels"
            detail = ErrorDetail(field="body", message=message, type="json_too_deep")
            summary = f"invalid request: body: {message}"
            await error_response(422, "validation_error", summary, [detail])(scope, receive, send)
            return
        await self.app(scope, _replaying(body, receive), send)


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
        if scope["method"] not in _BODY_METHODS or _is_upload(scope):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if b"\x00" in body or b"\\u0000" in body:
            try:
                field = _nul_path(json.loads(body), "") or "body"
            except ValueError:
                field = "body"
            await _refuse(scope, receive, send, field)
            return
        await self.app(scope, _replaying(body, receive), send)


async def _refuse(scope: Scope, receive: Receive, send: Send, field: str) -> None:
    message = "NUL characters are not allowed"
    detail = ErrorDetail(field=field, message=message, type="nul_character")
    summary = f"invalid request: {field}: {message}"
    await error_response(422, "validation_error", summary, [detail])(scope, receive, send)
