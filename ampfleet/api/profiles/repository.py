"""Every query of a job's profiles (their state rules are core.profiles')."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Artifact, Profile


def for_job(session: Session, job_id: str, limit: int) -> list[Profile]:
    """Newest first."""
    return list(
        session.scalars(
            select(Profile)
            .where(Profile.job_id == job_id)
            .order_by(Profile.created_at.desc(), Profile.id.desc())
            .limit(limit)
        )
    )


def by_id(session: Session, job_id: str, profile_id: str) -> Profile | None:
    return session.scalar(select(Profile).where(Profile.job_id == job_id, Profile.id == profile_id))


def listed(session: Session, job_id: str, names: Sequence[str]) -> dict[str, Artifact]:
    """Of these artifact names, those the job lists, by name."""
    if not names:
        return {}
    rows = session.scalars(
        select(Artifact).where(Artifact.job_id == job_id, Artifact.name.in_(list(names)))
    )
    return {row.name: row for row in rows}
