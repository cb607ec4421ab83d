"""Every query of the projects resource. Queued jobs are counted as admission counts them
for the queue quota (jobs/repository.py)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.api.jobs.repository import count_queued
from ampfleet.core.models import Allocation, Job, Project

__all__ = ["count_queued", "get", "known_names", "slots_in_use"]


def get(session: Session, name: str) -> Project | None:
    return session.get(Project, name)


def known_names(session: Session) -> set[str]:
    """Projects with a policy or with jobs."""
    return set(session.scalars(select(Project.name))) | set(
        session.scalars(select(Job.project).distinct())
    )


def slots_in_use(session: Session, name: str) -> int:
    used = session.scalar(
        select(func.coalesce(func.sum(Allocation.slots), 0))
        .join(Job, Job.id == Allocation.job_id)
        .where(Job.project == name, Allocation.released_at.is_(None))
    )
    return int(used or 0)
