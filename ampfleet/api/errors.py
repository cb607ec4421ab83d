"""One exception hierarchy, one JSON error envelope, one set of handlers.

Every error response looks like
    {"error": {"code": "...", "message": "...", "details": [{"field": "...", "message": "..."}]}}
and never carries a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ampfleet.core.validation import describe_invalid, dotted

log = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    field: str | None = Field(None, description="Dotted path of the offending input field.")
    message: str
    type: str | None = None


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable error code.")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class AmpfleetError(Exception):
    status_code = 400
    code = "bad_request"
    headers: Mapping[str, str] | None = None  # sent with the envelope (Content-Range, ...)

    def __init__(self, message: str, details: list[ErrorDetail] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class NotFoundError(AmpfleetError):
    status_code = 404
    code = "not_found"


class ConflictError(AmpfleetError):
    status_code = 409
    code = "conflict"


class UnprocessableError(AmpfleetError):
    status_code = 422
    code = "validation_error"

    @classmethod
    def for_field(cls, field: str, message: str) -> UnprocessableError:
        return cls(f"{field}: {message}", [ErrorDetail(field=field, message=message)])


class TooManyRequestsError(AmpfleetError):
    status_code = 429
    code = "too_many_requests"

    def __init__(self, message: str, retry_after_s: int = 30) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PayloadTooLargeError(AmpfleetError):
    status_code = 413
    code = "payload_too_large"


class ServiceUnavailableError(AmpfleetError):
    status_code = 503
    code = "service_unavailable"
    # Every 503 says when to come back: an outage is the one answer that asks for a retry.
    headers: Mapping[str, str] | None = {"Retry-After": "2"}


def error_response(
    status_code: int,
    code: str,
    message: str,
    details: list[ErrorDetail] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = ErrorEnvelope(error=ErrorBody(code=code, message=message, details=details or []))
    return JSONResponse(body.model_dump(mode="json"), status_code=status_code, headers=headers)


def _request_field(error: Mapping[str, Any]) -> str:
    """The offending field without the part of the request it came in (`body.a.b` is `a.b`)."""
    if error["type"] == "json_invalid":
        return "body"
    parts = [str(p) for p in error.get("loc", ())]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts[:1]
    return dotted(parts)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AmpfleetError)
    async def _ampfleet(_: Request, exc: AmpfleetError) -> JSONResponse:
        headers = exc.headers
        if isinstance(exc, TooManyRequestsError):
            headers = {"Retry-After": str(exc.retry_after_s)}
        return error_response(exc.status_code, exc.code, exc.message, exc.details, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, details = describe_invalid("request", exc.errors(), ErrorDetail, _request_field)
        return error_response(422, "validation_error", message, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # The JSON could not be decoded at all (for instance nested too deeply).
            message = "the body could not be parsed as JSON"
            detail = ErrorDetail(field="body", message=message, type="json_invalid")
            return error_response(422, "validation_error", message, [detail])
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database_down(_: Request, exc: OperationalError | InterfaceError) -> JSONResponse:
        log.warning("database unavailable: %s", exc.orig)
        return error_response(
            503,
            "service_unavailable",
            "the database is unavailable; retry shortly",
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(PoolTimeoutError)
    async def _pool_exhausted(_: Request, exc: PoolTimeoutError) -> JSONResponse:
        # Every connection of this process's pool is busy: say so at once, so the client
        # backs off, rather than queue more requests behind the ones already waiting.
        log.warning("database connection pool exhausted: %s", exc)
        return error_response(
            503,
            "service_unavailable",
            "the server is busy (no free database connection); retry shortly",
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; it has been logged")


def responses(*status_codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting the error envelope for each status code."""
    descriptions = {
        400: "Bad request",
        401: "Missing or invalid API key",
        403: "The key may not do this (read-only, other project, or not admin)",
        404: "Not found",
        409: "Conflict with the current state",
        413: "Request body too large",
        416: "The Range lies outside the object; `Content-Range` gives its size",
        422: "Invalid input; `details` names each offending field",
        429: "Too many requests",
        503: "A backing service is unavailable",
    }
    return {
        code: {"model": ErrorEnvelope, "description": descriptions.get(code, "Error")}
        for code in status_codes
    }
