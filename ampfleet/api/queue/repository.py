"""Every query of the queue resource; fair-share inputs are read as the scheduler reads them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.fairshare import project_policies
from ampfleet.core.models import Job
from ampfleet.core.states import JobState
from ampfleet.core.usage import usage_by_project

__all__ = ["QueuedJob", "jobs_by_id", "project_policies", "queued_jobs", "usage_by_project"]


class QueuedJob(NamedTuple):
    """What ordering needs of a queued job: a few columns, since every queued job is read."""

    id: str
    project: str
    priority: int
    gang_size: int
    not_before: datetime | None


def queued_jobs(session: Session) -> list[QueuedJob]:
    rows = session.execute(
        select(Job.id, Job.project, Job.priority, Job.gang_size, Job.not_before).where(
            Job.state == JobState.QUEUED
        )
    )
    return [QueuedJob(*row) for row in rows]


def jobs_by_id(session: Session, ids: Sequence[str]) -> dict[str, Job]:
    if not ids:
        return {}
    return {job.id: job for job in session.scalars(select(Job).where(Job.id.in_(ids)))}
