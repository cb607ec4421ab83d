"""Console sessions: what a one-time login token is exchanged for (service.py), presented as
`Authorization: Bearer ampc_...` exactly as a key is, and kept where the console keeps a
typed key (the tab's sessionStorage).

A session is signed, not stored (signed_tokens.py): it names the key it acts for and when it
ends (AMPFLEET_CONSOLE_SESSION_TTL_S). It may do what its key may, for that long and no
longer; it dies with its key (every request reads the key, as for the key itself); and it
cannot ask for a login token, so it can never renew itself. The long-lived key never
reaches the browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ampfleet.api.errors import AmpfleetError
from ampfleet.api.signed_tokens import sign, verified_claims
from ampfleet.core.settings import get_settings

PREFIX = "ampc_"
PURPOSE = b"ampfleet-console-session"


class SessionExpiredError(AmpfleetError):
    status_code = 401
    code = "session_expired"


@dataclass(frozen=True)
class SessionClaims:
    key_id: str
    expires_at: datetime


def is_session(presented: str) -> bool:
    return presented.startswith(PREFIX)


def issue(key_id: str, now: datetime) -> tuple[str, datetime]:
    """A session for key `key_id` from `now`, and when it ends (whole seconds)."""
    ttl = timedelta(seconds=get_settings().console_session_ttl_s)
    ends = datetime.fromtimestamp(int((now + ttl).timestamp()), UTC)
    return PREFIX + sign(PURPOSE, f"{key_id}|{int(ends.timestamp())}"), ends


def claims_of(presented: str, now: datetime) -> SessionClaims | None:
    """What a session this server signed says; None for anything else (then it is checked
    as a key, and refused as a wrong one); SessionExpiredError once it has ended."""
    claims = verified_claims(PURPOSE, presented.removeprefix(PREFIX)) or ""
    key_id, _, ends = claims.partition("|")
    if not key_id or not ends.isascii() or not ends.isdigit():
        return None
    expires_at = datetime.fromtimestamp(int(ends), UTC)
    if expires_at <= now:
        raise SessionExpiredError(
            f"this console session ended at {expires_at:%Y-%m-%d %H:%M:%S} UTC: open the "
            "console again (`ampfleet ui`), or log in with an API key"
        )
    return SessionClaims(key_id=key_id, expires_at=expires_at)
