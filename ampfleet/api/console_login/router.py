"""HTTP of console login; rules live in service.py, queries in repository.py."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from ampfleet.api.auth import CurrentPrincipal, limit_wrong_credentials
from ampfleet.api.console_login import service
from ampfleet.api.console_login.schemas import LoginTokenOut, SessionIn, SessionOut
from ampfleet.api.deps import Now, SessionDep
from ampfleet.api.errors import responses

router = APIRouter(tags=["console"])


@router.post(
    "/v1/console-tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=LoginTokenOut,
    responses=responses(401, 403),
    summary="A one-time login token for the web console (what `ampfleet ui` opens)",
    description="Opens the console at `login_path` below the API's address, once, within "
    "AMPFLEET_CONSOLE_LOGIN_TTL_S (60 s), as the key that asked. A console session cannot "
    "ask (403): it would renew itself for ever.",
)
def create_console_token(
    session: SessionDep, principal: CurrentPrincipal, now: Now
) -> LoginTokenOut:
    return service.issue(session, principal, now)


@router.post(
    "/v1/console-sessions",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionOut,
    responses=responses(401, 422, 429),
    summary="Exchange a console login token for a console session",
    description="Needs no key: the token is the credential. 401 `login_token_invalid` for "
    "a token never issued, `login_token_used` for one exchanged already, "
    "`login_token_expired` past its minute, `unauthorized` when its key was revoked since. "
    "Wrong tokens count against the client address's budget of wrong keys (429 past it).",
)
def open_console_session(
    body: SessionIn, request: Request, session: SessionDep, now: Now
) -> SessionOut:
    try:
        return service.exchange(session, body.token, now)
    except service.LoginTokenInvalidError:
        limit_wrong_credentials(request)
        raise
