"""Every query of a job's artifacts."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Artifact


def for_job(session: Session, job_id: str, kind: str | None = None) -> list[Artifact]:
    stmt = select(Artifact).where(Artifact.job_id == job_id)
    if kind is not None:
        stmt = stmt.where(Artifact.kind == kind).order_by(Artifact.step, Artifact.id)
    else:
        stmt = stmt.order_by(Artifact.created_at, Artifact.id)
    return list(session.scalars(stmt))


def by_name(session: Session, job_id: str, name: str) -> Artifact | None:
    return session.scalars(
        select(Artifact).where(Artifact.job_id == job_id, Artifact.name == name)
    ).one_or_none()
