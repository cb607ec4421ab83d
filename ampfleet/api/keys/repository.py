"""Every query of the keys resource."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.api.auth import ProjectScope
from ampfleet.core.models import ApiKey


def get(session: Session, key_id: str) -> ApiKey | None:
    return session.get(ApiKey, key_id)


def listing(session: Session, scope: ProjectScope) -> list[ApiKey]:
    return list(session.scalars(scope.restrict(select(ApiKey).order_by(ApiKey.id), ApiKey.project)))
