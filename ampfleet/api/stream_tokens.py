"""Short-lived tokens for one job's event stream, for clients that cannot send a header.

A browser's native EventSource sends no Authorization header, so it cannot present an API
key. A client holding a key asks for a token (POST /v1/jobs/{id}/events/token) and opens
the stream with it as the `token` query parameter. A token is worth far less than a key if
it leaks through a URL: it names one job and the key that asked for it, opens that job's
event stream only, and lapses after STREAM_TOKEN_TTL_S; revoking the key revokes its tokens
(the key is checked when the stream opens and while it lasts). It is an HMAC under the
server secret, so nothing is stored. The access log writes the path without the query
string, so a token is never logged.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

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
    token: str = Field(description="Pass as `?token=` to this job's event stream only.")
    expires_at: datetime


def issue(job_id: str, principal: Principal) -> StreamToken:
    expires = int(time.time()) + STREAM_TOKEN_TTL_S
    token = sign(PURPOSE, f"{job_id}|{principal.key_id}|{expires}")
    return StreamToken(token=token, expires_at=datetime.fromtimestamp(expires, UTC))


def principal_for(token: str, job_id: str) -> Principal:
    """The key behind a token issued for `job_id`'s stream; 401 for anything else."""
    claims = verified_claims(PURPOSE, token)
    parts = claims.split("|") if claims else []
    if len(parts) != 3 or parts[0] != job_id or not parts[2].isascii() or not parts[2].isdigit():
        raise UnauthorizedError("the stream token is not valid for this job's event stream")
    if int(parts[2]) < time.time():
        raise UnauthorizedError("the stream token has expired; ask for a new one")
    with unit_of_work(get_read_sessionmaker()) as session:
        row = session.get(ApiKey, parts[1])
        if row is None or row.revoked_at is not None:
            raise UnauthorizedError("the API key behind this stream token has been revoked")
        return Principal(key_id=row.id, project=row.project, role=Role(row.role))


async def stream_principal(
    job_id: str,
    request: Request,
    background: BackgroundTasks,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    header_key: Annotated[str | None, Security(api_key_header)],
    now: Now,
    token: Annotated[
        str | None,
        Query(
            max_length=512,
            description="A token from POST /v1/jobs/{job_id}/events/token, for clients that "
            "cannot send Authorization (a browser's EventSource).",
        ),
    ] = None,
) -> Principal:
    """The caller of a job's event stream: by its key, or by a stream token for that job."""
    if token is not None and credentials is None and header_key is None:
        return await run_in_threadpool(principal_for, token, job_id)
    return await current_principal(request, background, credentials, header_key, now)
