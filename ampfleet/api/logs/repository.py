"""Every query of the logs resource."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ampfleet.core.models import Job, LogLine

Filter = list[ColumnElement[bool]]


def line_filter(job_id: str, rank: int | None, stream: str | None) -> Filter:
    conditions: Filter = [LogLine.job_id == job_id]
    if rank is not None:
        conditions.append(LogLine.rank == rank)
    if stream is not None:
        conditions.append(LogLine.stream == stream)
    return conditions


def id_before_tail(session: Session, conditions: Filter, tail: int) -> int:
    """The id just before the last `tail` matching lines."""
    ids = session.scalars(
        select(LogLine.id).where(*conditions).order_by(LogLine.id.desc()).limit(tail)
    ).all()
    return ids[-1] - 1 if ids else 0


def lines_after(session: Session, conditions: Filter, after: int, limit: int) -> list[LogLine]:
    return list(
        session.scalars(
            select(LogLine).where(*conditions, LogLine.id > after).order_by(LogLine.id).limit(limit)
        )
    )


def job_state(session: Session, job_id: str) -> str | None:
    return session.scalar(select(Job.state).where(Job.id == job_id))
