"""API keys: `amp_<prefix>_<secret>`. The prefix finds the row; the secret is checked
against a keyed hash (HMAC-SHA256 with the server secret) in constant time. Secrets are
high-entropy random, so a slow password hash would add latency and no safety."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.ids import new_id
from ampfleet.core.models import ApiKey, utcnow
from ampfleet.core.roles import Role


def keyed_hash(secret: str, pepper: str) -> str:
    """HMAC-SHA256 under the server secret: what is stored of a key, or of a login token."""
    return hmac.new(pepper.encode(), secret.encode(), hashlib.sha256).hexdigest()


def create_key(
    session: Session, *, project: str, role: Role, name: str, pepper: str
) -> tuple[ApiKey, str]:
    """A new key row and the key itself, which is never stored and cannot be shown again."""
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = ApiKey(
        id=new_id("key"),
        prefix=prefix,
        secret_hash=keyed_hash(secret, pepper),
        project=project,
        role=role.value,
        name=name,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row, f"amp_{prefix}_{secret}"


def verify(session: Session, presented: str, pepper: str) -> ApiKey | None:
    """The active key row for `presented`, or None. Runs the hash comparison even for an
    unknown prefix, so timing does not tell which prefixes exist."""
    parts = presented.split("_", 2)
    prefix, secret = (parts[1], parts[2]) if len(parts) == 3 and parts[0] == "amp" else ("", "")
    row = session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
    expected = row.secret_hash if row is not None else keyed_hash("-", pepper)
    if not hmac.compare_digest(expected, keyed_hash(secret, pepper)):
        return None
    if row is None or row.revoked_at is not None:
        return None
    return row


def has_active_admin(session: Session) -> bool:
    return (
        session.scalars(
            select(ApiKey.id).where(ApiKey.role == Role.ADMIN, ApiKey.revoked_at.is_(None))
        ).first()
        is not None
    )
