"""Every query of code bundles."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Bundle


def by_content(session: Session, project: str, sha256: str) -> Bundle | None:
    return session.scalars(
        select(Bundle).where(Bundle.project == project, Bundle.sha256 == sha256)
    ).one_or_none()


def listed(session: Session, project: str | None, limit: int) -> list[Bundle]:
    stmt = select(Bundle).order_by(Bundle.id.desc()).limit(limit)
    if project is not None:
        stmt = stmt.where(Bundle.project == project)
    return list(session.scalars(stmt))
