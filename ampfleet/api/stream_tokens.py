"""Short-lived tokens for one job's (or sweep's) event stream, for clients that cannot send a
header.

A browser's native EventSource sends no Authorization header, so it cannot present an API
key. A client holding a key asks for a token (POST /v1/jobs/{id}/events/token, or
/v1/sweeps/{id}/events/token) and opens the stream with it as the `token` query parameter.
A token is worth far less than a key if it leaks through a URL: it names one job or sweep
(their ids never collide) and the key that asked for it, opens that one's event stream only,
and lapses after STREAM_TOKEN_TTL_S; revoking the key revokes its tokens
(the key is checked when the stream opens and while it lasts). It is an HMAC under the
server secret, so nothing is stored. The access log writes the path without the query
string, so a token is never logged.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import BackgroundTasks, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ampfleet.api.auth import (
    Principal,
    UnauthorizedError,
    api_key_header,
    bearer,
    current_principal,
)
from ampfleet.api.deps import Now
from ampfleet.api.signed_tokens import sign, verified_claims
from ampfleet.core.db import get_read_sessionmaker, unit_of_work
from ampfleet.core.models import ApiKey
from ampfleet.core.roles import Role

STREAM_TOKEN_TTL_S = 300
PURPOSE = b"ampfleet-job-events-stream"


class StreamToken(BaseModel):
    token: str = Field(description="Pass as `?token=` to this event stream only.")
    expires_at: datetime


def issue(subject_id: str, principal: Principal) -> StreamToken:
    """A token for the event stream of `subject_id`, a job or a sweep."""
    expires = int(time.time()) + STREAM_TOKEN_TTL_S
    token = sign(PURPOSE, f"{subject_id}|{principal.key_id}|{expires}")
    return StreamToken(token=token, expires_at=datetime.fromtimestamp(expires, UTC))


def principal_for(token: str, subject_id: str) -> Principal:
    """The key behind a token issued for `subject_id`'s stream; 401 for anything else."""
    claims = verified_claims(PURPOSE, token)
    parts = claims.split("|") if claims else []
    valid = len(parts) == 3 and parts[0] == subject_id
    if not valid or not parts[2].isascii() or not parts[2].isdigit():
        raise UnauthorizedError("the stream token is not valid for this event stream")
    if int(parts[2]) < time.time():
        raise UnauthorizedError("the stream token has expired; ask for a new one")
    with unit_of_work(get_read_sessionmaker()) as session:
        row = session.get(ApiKey, parts[1])
        if row is None or row.revoked_at is not None:
            raise UnauthorizedError("the API key behind this stream token has been revoked")
        return Principal(key_id=row.id, project=row.project, role=Role(row.role))


Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
HeaderKey = Annotated[str | None, Security(api_key_header)]


def _token_query(path: str) -> Any:
    return Query(
        max_length=512,
        description=f"A token from POST {path}/events/token, for clients that cannot send "
        "Authorization (a browser's EventSource).",
    )


async def stream_principal(
    job_id: str,
    request: Request,
    background: BackgroundTasks,
    credentials: Credentials,
    header_key: HeaderKey,
    now: Now,
    token: Annotated[str | None, _token_query("/v1/jobs/{job_id}")] = None,
) -> Principal:
    """The caller of a job's event stream: by its key, or by a stream token for that job."""
    return await _caller(job_id, request, background, credentials, header_key, now, token)


async def sweep_stream_principal(
    sweep_id: str,
    request: Request,
    background: BackgroundTasks,
    credentials: Credentials,
    header_key: HeaderKey,
    now: Now,
    token: Annotated[str | None, _token_query("/v1/sweeps/{sweep_id}")] = None,
) -> Principal:
    """The caller of a sweep's event stream: by its key, or by a stream token for it."""
    return await _caller(sweep_id, request, background, credentials, header_key, now, token)


async def _caller(
    subject_id: str,
    request: Request,
    background: BackgroundTasks,
    credentials: HTTPAuthorizationCredentials | None,
    header_key: str | None,
    now: datetime,
    token: str | None,
) -> Principal:
    if token is not None and credentials is None and header_key is None:
        return await run_in_threadpool(principal_for, token, subject_id)
    return await current_principal(request, background, credentials, header_key, now)
