"""Queries of console login tokens."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ampfleet.core.models import ConsoleLoginToken


def by_hash(session: Session, token_hash: str) -> ConsoleLoginToken | None:
    return session.scalars(
        select(ConsoleLoginToken).where(ConsoleLoginToken.token_hash == token_hash)
    ).one_or_none()


def claim(session: Session, token_id: str, now: datetime) -> bool:
    """Marks the token used, if nobody did first: the one exchange that may succeed."""
    result = session.execute(
        update(ConsoleLoginToken)
        .where(ConsoleLoginToken.id == token_id, ConsoleLoginToken.used_at.is_(None))
        .values(used_at=now)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def forget_lapsed(session: Session, before: datetime) -> None:
    session.execute(delete(ConsoleLoginToken).where(ConsoleLoginToken.expires_at < before))
