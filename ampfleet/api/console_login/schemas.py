"""Pydantic I/O models of console login."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from ampfleet.core.roles import Role


class LoginTokenOut(BaseModel):
    token: str = Field(description="Opens one console session, once, until `expires_at`.")
    expires_at: datetime
    expires_in_s: float = Field(description="Its lifetime, AMPFLEET_CONSOLE_LOGIN_TTL_S.")
    login_path: str = Field(
        description="Where a browser opens it, below the API's address: `/ui/#login=<token>` "
        "(after `#`, so the token never reaches a server's or proxy's log)."
    )


class SessionIn(BaseModel):
    token: str = Field(max_length=128, description="A token from POST /v1/console-tokens.")


class SessionOut(BaseModel):
    session: str = Field(
        description="The console's credential: `Authorization: Bearer <session>` until "
        "`expires_at`, with the project and role of the key that asked for the token."
    )
    expires_at: datetime
    key_id: str
    project: str
    role: Role
