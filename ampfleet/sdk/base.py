"""What `Client` and `AsyncClient` share: configuration, headers and the operations."""

from __future__ import annotations

from typing import Generic, TypeVar

import httpx

from ampfleet import __version__
from ampfleet.sdk import config
from ampfleet.sdk.flows import Operations

HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)

KEEPALIVE_EXPIRY_S = 2.0
"""How long an idle connection is kept for the next request: well under the API server's
keep-alive (uvicorn's 5 s, as `ampfleet api` runs it). With httpx's default, also 5 s, a
request sent on a connection idle for about 5 s can meet the server closing it ("Server
disconnected without sending a response"): the client's 5 s start when it has read the
answer, the server's earlier, when it sent it."""
LIMITS = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)


class ClientBase(Generic[HttpT]):
    page_size = 100  # jobs a request when `list` goes through the pages

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_after: float = 60.0,
        max_reconnects: int = 5,
    ) -> None:
        """`base_url` defaults to AMPFLEET_URL, else to where the server's own settings
        (AMPFLEET_API_HOST, AMPFLEET_API_PORT: http://127.0.0.1:8000 unset) make it listen;
        `api_key` to AMPFLEET_API_KEY, else the key in `var/admin.key` under the current
        folder (both from the environment or `.env`, as the server reads them). Answers
        429 are retried `max_retries` times after their Retry-After (when that is at most
        `max_retry_after` seconds); a live stream reconnects from its last frame, up to
        `max_reconnects` times in a row."""
        self.base_url, self.api_key = config.resolve(base_url, api_key)
        self.timeout = timeout
        self.headers = {"Accept": "application/json", "User-Agent": f"ampfleet/{__version__}"}
        if self.api_key:
            self.headers["Authorization"] = f"Bearer {self.api_key}"
        self._ops = Operations(
            max_retries=max_retries,
            max_retry_after=max_retry_after,
            max_reconnects=max_reconnects,
        )
        self._http: HttpT = self._connect()

    def _connect(self) -> HttpT:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"
