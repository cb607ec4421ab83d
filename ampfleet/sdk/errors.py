"""What the SDK raises: the API's error envelope as exceptions, and the client's own failures.

ClientError
├── ApiError (status, code, message, details)   the server answered with an error
│   ├── Unauthorized 401, Forbidden 403, NotFound 404, Conflict 409
│   ├── ValidationFailed 422 ── SpecError (a bad job spec, refused before any request)
│   ├── RateLimited 429 (retry_after), ServerError 5xx
├── ConnectionFailed      the server could not be reached, or the connection broke
│   └── StreamDisconnected (last_event_id: resume from there)
├── WaitTimeout           `wait` ran out of time (the job as last seen)
├── ProfileTimeout        `wait_profile` ran out of time (the profile as last seen)
└── DownloadCorrupted     the bytes downloaded are not the ones listed (nothing kept)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from ampfleet.sdk.models import Job, Profile


@dataclass(frozen=True)
class ErrorDetail:
    """One offending input: `field` is a dotted path such as `resources.nodes`."""

    field: str | None
    message: str
    type: str | None = None


class ClientError(Exception):
    """Base of everything this SDK raises."""


class ApiError(ClientError):
    """The API answered with an error envelope `{"error": {"code", "message", "details"}}`."""

    def __init__(
        self, status: int, code: str, message: str, details: list[ErrorDetail] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status}, {self.code})"


class Unauthorized(ApiError):
    """401: no API key, or one that is not valid or has been revoked."""


class Forbidden(ApiError):
    """403: the key may not do this (read-only, another project, not admin)."""


class NotFound(ApiError):
    """404: no such job, key or node (or one this key may not see)."""


class Conflict(ApiError):
    """409: not possible in the current state, e.g. cancelling a finished job."""


class ValidationFailed(ApiError):
    """422: invalid input; `details` names every offending field."""

    @property
    def fields(self) -> list[str]:
        return [d.field for d in self.details if d.field]


class SpecError(ValidationFailed):
    """A job spec that cannot be valid, found before anything was sent."""


class RateLimited(ApiError):
    """429: too many requests (or a full project queue); retried automatically first."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[ErrorDetail] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, code, message, details)
        self.retry_after = retry_after


class ServerError(ApiError):
    """5xx: the server failed, or a service behind it is unavailable."""


class ConnectionFailed(ClientError):
    """The API could not be reached, or the connection broke before the answer was complete."""


class StreamDisconnected(ConnectionFailed):
    """A live stream kept failing to reconnect; pass `last_event_id` to resume it later."""

    def __init__(self, message: str, last_event_id: str | None) -> None:
        super().__init__(message)
        self.last_event_id = last_event_id


class WaitTimeout(ClientError, TimeoutError):
    """`wait` gave up before the job reached a terminal state; `job` is how it was last seen."""

    def __init__(self, job: Job, timeout: float) -> None:
        progress = job.progress
        total = f"/{progress.total_steps}" if progress.total_steps else ""
        super().__init__(
            f"job {job.id} is still {job.state.value} after {timeout:g}s "
            f"(step {progress.step}{total})"
        )
        self.job = job
        self.timeout = timeout


class ProfileTimeout(ClientError, TimeoutError):
    """`wait_profile` gave up before the profile was done, failed or cancelled; `profile` is
    how it was last seen."""

    def __init__(self, profile: Profile, timeout: float) -> None:
        super().__init__(f"profile {profile.id} is still {profile.state} after {timeout:g}s")
        self.profile = profile
        self.timeout = timeout


class DownloadCorrupted(ClientError):
    """A download's bytes do not have the size or sha256 the API listed for them: the
    partial file is deleted and no file is left at the target."""

    def __init__(self, name: str, expected: str, actual: str) -> None:
        super().__init__(f"{name}: downloaded bytes have sha256 {actual}, expected {expected}")
        self.name = name
        self.expected = expected
        self.actual = actual


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
}


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Retry-After in seconds (the API sends whole seconds; HTTP dates are not used)."""
    value = response.headers.get("Retry-After", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


def _envelope(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else None


def error_from_response(response: httpx.Response) -> ApiError:
    """The exception for an error response; a body without the envelope still gives one."""
    status = response.status_code
    error = _envelope(response)
    if error is None:
        text = response.text.strip()[:200] or response.reason_phrase
        code, message, details = "http_error", f"HTTP {status}: {text}", []
    else:
        code = str(error.get("code", "http_error"))
        message = str(error.get("message", response.reason_phrase))
        details = [
            ErrorDetail(field=d.get("field"), message=str(d.get("message", "")), type=d.get("type"))
            for d in error.get("details") or []
            if isinstance(d, dict)
        ]
    if status == 429:
        return RateLimited(status, code, message, details, retry_after_seconds(response))
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return kind(status, code, message, details)
