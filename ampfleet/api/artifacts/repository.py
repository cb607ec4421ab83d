"""Every query of a job's artifacts."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Artifact, Metric


def for_job(session: Session, job_id: str, kind: str | None = None) -> list[Artifact]:
    stmt = select(Artifact).where(Artifact.job_id == job_id)
    if kind is not None:
        stmt = stmt.where(Artifact.kind == kind).order_by(Artifact.step, Artifact.id)
    else:
        stmt = stmt.order_by(Artifact.created_at, Artifact.id)
    return list(session.scalars(stmt))


def latest_of_kind(session: Session, job_id: str, kind: str, limit: int) -> list[Artifact]:
    """The job's `limit` artifacts of `kind` with the highest steps, by step."""
    stmt = (
        select(Artifact)
        .where(Artifact.job_id == job_id, Artifact.kind == kind)
        .order_by(Artifact.step.desc(), Artifact.id.desc())
        .limit(limit)
    )
    return list(reversed(session.scalars(stmt).all()))


def named_under(session: Session, job_id: str, prefix: str) -> list[Artifact]:
    """The job's artifacts whose names begin with `prefix` (a folder, such as hf/merged/),
    by name."""
    stmt = (
        select(Artifact)
        .where(Artifact.job_id == job_id, Artifact.name.startswith(prefix, autoescape=True))
        .order_by(Artifact.name)
    )
    return list(session.scalars(stmt))


def by_name(session: Session, job_id: str, name: str) -> Artifact | None:
    return session.scalars(
        select(Artifact).where(Artifact.job_id == job_id, Artifact.name == name)
    ).one_or_none()


def metrics_at(
    session: Session, job_id: str, names: Collection[str], steps: Collection[int]
) -> dict[int, dict[str, float]]:
    """The points of series `names` at `steps`, by step; where a step was reported again
    (a rewound or resumed attempt), its latest. By the (job, name, step) index: the names
    are the job's own (its latest_metrics), never a scan of all its points."""
    if not names or not steps:
        return {}
    rows = session.execute(
        select(Metric.step, Metric.name, Metric.value)
        .where(Metric.job_id == job_id, Metric.name.in_(names), Metric.step.in_(steps))
        .order_by(Metric.id)
    )
    found: dict[int, dict[str, float]] = {}
    for step, name, value in rows:
        found.setdefault(step, {})[name] = value
    return found
