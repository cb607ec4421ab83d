"""Every query of the keys resource."""

from __future__ import annotations

import hashlib

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.api.auth import ProjectScope
from ampfleet.core.db import is_postgres
from ampfleet.core.models import ApiKey


def get(session: Session, key_id: str) -> ApiKey | None:
    return session.get(ApiKey, key_id)


def listing(session: Session, scope: ProjectScope) -> list[ApiKey]:
    return list(session.scalars(scope.restrict(select(ApiKey).order_by(ApiKey.id), ApiKey.project)))


def lock_project_keys(session: Session, project: str) -> None:
    """Hold the project's key count until the transaction ends, so that concurrent creates
    cannot all count the same keys (PostgreSQL: an advisory lock; SQLite serialises writers
    already)."""
    if is_postgres(session):
        digest = hashlib.blake2b(f"keys\0{project}".encode(), digest_size=8).digest()
        session.execute(select(func.pg_advisory_xact_lock(int.from_bytes(digest, signed=True))))


def count_active(session: Session, project: str) -> int:
    statement = select(func.count()).where(ApiKey.project == project, ApiKey.revoked_at.is_(None))
    return session.scalar(statement) or 0
