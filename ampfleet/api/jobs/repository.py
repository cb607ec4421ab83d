"""Every query of the jobs resource."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ampfleet.api.auth import ProjectScope
from ampfleet.core import job_creation
from ampfleet.core.models import (
    Allocation,
    Artifact,
    Job,
    JobEvent,
    LogLine,
    Metric,
    OutboxMessage,
    Profile,
)


def get(session: Session, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def count_queued(session: Session, project: str) -> int:
    return job_creation.count_queued(session, project)


def get_by_idempotency_key(session: Session, project: str, key: str) -> Job | None:
    return session.scalars(
        select(Job).where(Job.project == project, Job.idempotency_key == key)
    ).one_or_none()


def page(
    session: Session,
    scope: ProjectScope,
    *,
    states: Sequence[str],
    before_id: str | None,
    limit: int,
) -> list[Job]:
    """Newest first; ids are time-ordered, so `before_id` is a stable cursor."""
    stmt = scope.restrict(select(Job).order_by(Job.id.desc()).limit(limit), Job.project)
    if states:
        stmt = stmt.where(Job.state.in_(states))
    if before_id:
        stmt = stmt.where(Job.id < before_id)
    return list(session.scalars(stmt))


def events(session: Session, job_id: str, after_id: int, limit: int) -> list[JobEvent]:
    return list(
        session.scalars(
            select(JobEvent)
            .where(JobEvent.job_id == job_id, JobEvent.id > after_id)
            .order_by(JobEvent.id)
            .limit(limit)
        )
    )


def delete_job(session: Session, job: Job) -> list[str]:
    """Deletes the job's row and every row that names it (its idempotency key is a column of
    the job); the sha256s its artifact rows named, for the caller to offer for deletion from
    the store once this transaction committed. Explicit deletes rather than the foreign keys'
    ON DELETE CASCADE: SQLite enforces those only with a per-connection pragma, and outbox
    rows name the job inside their JSON."""
    sha256s = set(session.scalars(select(Artifact.sha256).where(Artifact.job_id == job.id)))
    for table in (JobEvent, Metric, LogLine, Allocation, Artifact, Profile):
        session.execute(delete(table).where(table.job_id == job.id))
    session.execute(
        delete(OutboxMessage).where(OutboxMessage.kwargs["job_id"].as_string() == job.id)
    )
    session.delete(job)
    session.flush()
    return sorted(sha256s)
