"""Rules of console login: a key asks for a one-time token (what `ampfleet ui` opens); the
console exchanges it, once and within AMPFLEET_CONSOLE_LOGIN_TTL_S, for a session
(sessions.py). Like a key, a token is random, shown once and stored only as its keyed hash.
Flushes, never commits."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from ampfleet.api.auth import ForbiddenError, Principal, UnauthorizedError
from ampfleet.api.console_login import repository, sessions
from ampfleet.api.console_login.schemas import LoginTokenOut, SessionOut
from ampfleet.core.ids import new_id
from ampfleet.core.keys import keyed_hash
from ampfleet.core.models import ApiKey, ConsoleLoginToken
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings

TOKEN_PREFIX = "ampl_"  # noqa: S105 (a prefix that says what the token is)
LAPSED_KEPT = timedelta(hours=1)
"""How long a lapsed token's row stays: a use within it says "expired", not "not valid"."""
AGAIN = "run `ampfleet ui` for a new link"


class LoginTokenInvalidError(UnauthorizedError):
    code = "login_token_invalid"


class LoginTokenExpiredError(UnauthorizedError):
    code = "login_token_expired"


class LoginTokenUsedError(UnauthorizedError):
    code = "login_token_used"


def issue(session: Session, principal: Principal, now: datetime) -> LoginTokenOut:
    if principal.console_session:
        raise ForbiddenError(
            "a console session cannot open another one: ask with an API key (`ampfleet ui`)"
        )
    settings = get_settings()
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    repository.forget_lapsed(session, before=now - LAPSED_KEPT)
    row = ConsoleLoginToken(
        id=new_id("clt"),
        token_hash=keyed_hash(token, settings.secret_key),
        key_id=principal.key_id,
        created_at=now,
        expires_at=now + timedelta(seconds=settings.console_login_ttl_s),
    )
    session.add(row)
    session.flush()
    return LoginTokenOut(
        token=token,
        expires_at=row.expires_at,
        expires_in_s=settings.console_login_ttl_s,
        login_path=f"/ui/#login={token}",
    )


def exchange(session: Session, token: str, now: datetime) -> SessionOut:
    """A session for the token's key; 401 naming why not: a token never issued (or long
    lapsed), used already, expired, or its key revoked since. A refusal changes nothing."""
    row = repository.by_hash(session, keyed_hash(token, get_settings().secret_key))
    if row is None:
        raise LoginTokenInvalidError(f"this console login token is not valid: {AGAIN}")
    if row.used_at is not None:
        raise LoginTokenUsedError(f"this console login token was used already: {AGAIN}")
    if row.expires_at <= now:
        lasted = (row.expires_at - row.created_at).total_seconds()
        raise LoginTokenExpiredError(
            f"this console login token expired (it lasts {lasted:g} s): {AGAIN}"
        )
    key = session.get(ApiKey, row.key_id)
    if key is None or key.revoked_at is not None:
        raise UnauthorizedError("the API key behind this console login token has been revoked")
    if not repository.claim(session, row.id, now):  # another exchange of it got in first
        raise LoginTokenUsedError(f"this console login token was used already: {AGAIN}")
    credential, ends = sessions.issue(key.id, now)
    return SessionOut(
        session=credential,
        expires_at=ends,
        key_id=key.id,
        project=key.project,
        role=Role(key.role),
    )
