"""Every query of the jobs resource."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Job, JobEvent, Metric


def get(session: Session, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def get_by_idempotency_key(session: Session, project: str, key: str) -> Job | None:
    return session.scalars(
        select(Job).where(Job.project == project, Job.idempotency_key == key)
    ).one_or_none()


def page(
    session: Session,
    *,
    states: Sequence[str],
    project: str | None,
    before_id: str | None,
    limit: int,
) -> list[Job]:
    """Newest first; ids are time-ordered, so `before_id` is a stable cursor."""
    stmt = select(Job).order_by(Job.id.desc()).limit(limit)
    if states:
        stmt = stmt.where(Job.state.in_(states))
    if project:
        stmt = stmt.where(Job.project == project)
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


def metrics(
    session: Session,
    job_id: str,
    *,
    names: Sequence[str],
    from_step: int | None,
    to_step: int | None,
    limit: int,
) -> list[Metric]:
    stmt = select(Metric).where(Metric.job_id == job_id)
    if names:
        stmt = stmt.where(Metric.name.in_(names))
    if from_step is not None:
        stmt = stmt.where(Metric.step >= from_step)
    if to_step is not None:
        stmt = stmt.where(Metric.step <= to_step)
    return list(session.scalars(stmt.order_by(Metric.name, Metric.step, Metric.id).limit(limit)))
