"""Who is calling: API keys, roles, the one ownership check, and the rate limits (per key,
and per client address for requests with a wrong key).

The key is looked up in a unit of work of its own that hands its connection back before the
handler's session takes one: a request holding both would, under load, sit on one
connection while waiting for a second, and enough such requests starve the pool for all."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, TypeVar

from fastapi import BackgroundTasks, Depends, Query, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import QueryableAttribute
from starlette.concurrency import run_in_threadpool

from ampfleet.api.console_login import sessions
from ampfleet.api.console_login.sessions import SessionClaims
from ampfleet.api.deps import Now
from ampfleet.api.errors import (
    AmpfleetError,
    NotFoundError,
    TooManyRequestsError,
)
from ampfleet.api.key_cache import VerifiedKey, verified_keys
from ampfleet.api.ratelimit import buckets_for
from ampfleet.core.db import get_read_sessionmaker, session_scope, unit_of_work
from ampfleet.core.keys import verify
from ampfleet.core.models import ApiKey
from ampfleet.core.project_names import ProjectName
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings

bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer amp_...`")
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False)
LAST_USED_RESOLUTION = timedelta(minutes=1)
log = logging.getLogger(__name__)
RowT = TypeVar("RowT")


class UnauthorizedError(AmpfleetError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(AmpfleetError):
    status_code = 403
    code = "forbidden"


@dataclass(frozen=True)
class ProjectScope:
    """The projects a listing covers (`Principal.listing_scope`): `projects`, or every
    project when None."""

    projects: frozenset[str] | None

    def admits(self, project: str) -> bool:
        return self.projects is None or project in self.projects

    def restrict(
        self, statement: Select[RowT], project_column: QueryableAttribute[str]
    ) -> Select[RowT]:
        """`statement` with only the rows whose `project_column` the scope admits."""
        if self.projects is None:
            return statement
        return statement.where(project_column.in_(self.projects))


@dataclass(frozen=True)
class Principal:
    key_id: str
    project: str
    role: Role
    console_session: bool = False
    """Presented a console session (console_login/sessions.py), not the key itself."""

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def sees(self, project: str) -> bool:
        return self.is_admin or project == self.project

    def listing_scope(self, requested: str | None) -> ProjectScope:
        """What a listing filtered by `requested` (None or empty: no filter) covers, the
        one scoping rule of every listing: an admin's filter, or every project; anyone
        else's own project. Another project's rows do not exist for this key, so a filter
        naming it matches nothing: an empty page, as for a project with no rows."""
        if requested:
            return ProjectScope(frozenset({requested} if self.sees(requested) else ()))
        return ProjectScope(None if self.is_admin else frozenset({self.project}))

    def check_visible(self, project: str, what: str) -> None:
        """The ownership check, written once: another project's objects do not exist."""
        if not self.sees(project):
            raise NotFoundError(f"{what} not found")

    def check_can_write(self, project: str) -> None:
        if not self.sees(project):
            raise ForbiddenError(f"this key belongs to project {self.project}, not {project}")
        if self.role is Role.READ:
            raise ForbiddenError("this key is read-only")


async def current_principal(
    request: Request,
    background: BackgroundTasks,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    header_key: Annotated[str | None, Security(api_key_header)],
    now: Now,
) -> Principal:
    """The caller, on the event loop when the key was verified a moment ago and this
    process holds a lease of its rate (most requests: no thread, no I/O); what needs the
    database or Redis goes to the thread pool."""
    presented = credentials.credentials if credentials else header_key
    if not presented:
        raise UnauthorizedError("an API key is required: Authorization: Bearer <key>")
    settings = get_settings()
    # A session's end is checked on every request, remembered or not.
    session = sessions.claims_of(presented, now) if sessions.is_session(presented) else None
    key = verified_keys.get(presented) or await run_in_threadpool(_verified, presented, session)
    if key is None:
        await run_in_threadpool(limit_wrong_credentials, request)
        raise UnauthorizedError("the API key is not valid or has been revoked")
    buckets = buckets_for(settings.effective_broker_url, settings.redis_key_prefix)
    rate, burst = settings.rate_limit_per_s, settings.rate_limit_burst
    wait = buckets.take_without_io(key.id, rate, burst)
    if wait is None:
        wait = await run_in_threadpool(buckets.take, key.id, rate, burst)
    if wait:
        raise TooManyRequestsError(
            f"rate limit of {settings.rate_limit_per_s:g} requests/s for this key",
            retry_after_s=retry_after(wait),
        )
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        background.add_task(_note_use_apart, key.id, now)  # at most once a minute per key
        verified_keys.noted_use(presented, now)
    return Principal(
        key_id=key.id,
        project=key.project,
        role=Role(key.role),
        console_session=session is not None,
    )


def _verified(presented: str, console_session: SessionClaims | None) -> VerifiedKey | None:
    """The key's row checked in the database (for a console session, the row of the key it
    acts for), remembered for a moment if it verified."""
    settings = get_settings()
    # A key is only read: on SQLite a write session would take the one write lock.
    with unit_of_work(get_read_sessionmaker()) as session:
        if console_session is None:
            row = verify(session, presented, settings.secret_key)
        else:
            row = session.get(ApiKey, console_session.key_id)
    if row is None or row.revoked_at is not None:
        return None
    key = VerifiedKey(id=row.id, project=row.project, role=row.role, last_used_at=row.last_used_at)
    verified_keys.put(presented, key, settings.key_cache_ttl_s)
    return key


def retry_after(wait_s: float) -> int:
    """Whole seconds for a Retry-After header, never 0."""
    return max(1, round(wait_s + 0.5))


def limit_wrong_credentials(request: Request) -> None:
    """Wrong keys, and wrong console login tokens, draw on their client address's bucket (a
    key that does not exist has no bucket of its own), so guessing, or a client stuck on a
    bad key, is held to the configured rate and answered 429 past it. A request with no key
    guesses nothing and costs no look-up: it is not counted."""
    settings = get_settings()
    address = request.client.host if request.client else "unknown"
    buckets = buckets_for(settings.effective_broker_url, settings.redis_key_prefix)
    wait = buckets.take(
        f"address:{address}", settings.auth_failure_rate_per_s, settings.auth_failure_burst
    )
    if wait:
        raise TooManyRequestsError(
            f"too many requests with a wrong API key from {address}",
            retry_after_s=retry_after(wait),
        )


def key_still_valid(principal: Principal) -> bool:
    """Whether the key behind `principal` is still what it was when the request came in:
    for requests that outlast a revocation (live streams)."""
    with unit_of_work(get_read_sessionmaker()) as session:
        row = session.get(ApiKey, principal.key_id)
        return (
            row is not None
            and row.revoked_at is None
            and row.project == principal.project
            and row.role == principal.role.value
        )


def _note_use_apart(key_id: str, now: datetime) -> None:
    """The advisory last-used time, in its own unit of work after the response, for every
    request alike: a read request's session must stay read-only (on SQLite, turning its
    deferred read transaction into a write fails at once whenever another writer got in
    first), and losing the write to a busy database costs only a stale timestamp."""
    try:
        with session_scope() as writer:
            writer.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=now))
    except OperationalError as exc:
        log.info("last use of key %s not recorded: %s", key_id, exc.orig)


async def admin_principal(
    principal: Annotated[Principal, Depends(current_principal)],
) -> Principal:
    if not principal.is_admin:
        raise ForbiddenError("this needs an admin key")
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
AdminPrincipal = Annotated[Principal, Depends(admin_principal)]


async def listing_scope(
    principal: CurrentPrincipal,
    project: Annotated[
        ProjectName | None,
        Query(
            description="Only this project's. Another project's, for a key that is not "
            "admin, matches nothing.",
        ),
    ] = None,
) -> ProjectScope:
    return principal.listing_scope(project)


ListingScope = Annotated[ProjectScope, Depends(listing_scope)]
