"""Every query of code bundles."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Bundle, Job
from ampfleet.core.states import TERMINAL_STATES


def job_recipe(bundle_id: str) -> str:
    """What a job that runs a bundle stores as its recipe: how its jobs are found."""
    return f"bundle:{bundle_id}"


def unfinished_jobs_of(session: Session, bundle: Bundle, limit: int = 5) -> list[str]:
    return list(
        session.scalars(
            select(Job.id)
            .where(
                Job.project == bundle.project,
                Job.recipe == job_recipe(bundle.id),
                Job.state.not_in([state.value for state in TERMINAL_STATES]),
            )
            .order_by(Job.id)
            .limit(limit)
        )
    )


def by_content(session: Session, project: str, sha256: str) -> Bundle | None:
    return session.scalars(
        select(Bundle).where(Bundle.project == project, Bundle.sha256 == sha256)
    ).one_or_none()


def listed(session: Session, project: str | None, limit: int) -> list[Bundle]:
    stmt = select(Bundle).order_by(Bundle.id.desc()).limit(limit)
    if project is not None:
        stmt = stmt.where(Bundle.project == project)
    return list(session.scalars(stmt))
