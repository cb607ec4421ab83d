"""Every query of datasets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core.models import Dataset, Job
from ampfleet.core.states import TERMINAL_STATES


def by_content(session: Session, project: str, name: str, sha256: str) -> Dataset | None:
    return session.scalars(
        select(Dataset).where(
            Dataset.project == project, Dataset.name == name, Dataset.sha256 == sha256
        )
    ).one_or_none()


def next_version(session: Session, project: str, name: str) -> int:
    latest = session.scalar(
        select(func.max(Dataset.version)).where(Dataset.project == project, Dataset.name == name)
    )
    return (latest or 0) + 1


def named(session: Session, project: str, name: str, version: int | None) -> Dataset | None:
    """`name@version`, or the newest version of `name` when `version` is None."""
    stmt = select(Dataset).where(Dataset.project == project, Dataset.name == name)
    if version is not None:
        stmt = stmt.where(Dataset.version == version)
    return session.scalars(stmt.order_by(Dataset.version.desc()).limit(1)).one_or_none()


def listed(session: Session, project: str | None, name: str | None, limit: int) -> list[Dataset]:
    stmt = select(Dataset).order_by(Dataset.id.desc()).limit(limit)
    if project is not None:
        stmt = stmt.where(Dataset.project == project)
    if name is not None:
        stmt = stmt.where(Dataset.name == name)
    return list(session.scalars(stmt))


def unfinished_jobs_using(session: Session, dataset: Dataset, limit: int = 5) -> list[str]:
    """Unfinished jobs of the dataset's project whose resolved inputs name it."""
    return unfinished_jobs_reading(
        session, dataset.project, lambda item: item.get("dataset") == dataset.id, limit
    )


def unfinished_jobs_reading(
    session: Session, project: str, reads: Callable[[Mapping[str, Any]], bool], limit: int = 5
) -> list[str]:
    """Unfinished jobs of `project` one of whose resolved inputs `reads` says yes to."""
    rows = session.execute(
        select(Job.id, Job.resolved)
        .where(
            Job.project == project,
            Job.state.not_in([state.value for state in TERMINAL_STATES]),
        )
        .order_by(Job.id)
    )
    users = []
    for job_id, resolved in rows:
        inputs = (resolved or {}).get("inputs") or {}
        if any(reads(item) for item in inputs.values()):
            users.append(job_id)
            if len(users) == limit:
                break
    return users
