"""Metric queries that stay cheap on long series: the database buckets and aggregates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ampfleet.core.models import Metric


@dataclass(frozen=True)
class SeriesStats:
    name: str
    count: int
    first_step: int
    last_step: int
    minimum: float
    maximum: float


@dataclass(frozen=True)
class Bucket:
    step: int  # the first step in the bucket
    last_step: int
    mean: float
    minimum: float
    maximum: float
    count: int


def _filtered(
    job_id: str, names: Sequence[str], lo: int | None, hi: int | None
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [Metric.job_id == job_id]
    if names:
        conditions.append(Metric.name.in_(names))
    if lo is not None:
        conditions.append(Metric.step >= lo)
    if hi is not None:
        conditions.append(Metric.step <= hi)
    return conditions


def stats(
    session: Session, job_id: str, names: Sequence[str], lo: int | None, hi: int | None
) -> list[SeriesStats]:
    rows = session.execute(
        select(
            Metric.name,
            func.count(),
            func.min(Metric.step),
            func.max(Metric.step),
            func.min(Metric.value),
            func.max(Metric.value),
        )
        .where(*_filtered(job_id, names, lo, hi))
        .group_by(Metric.name)
        .order_by(Metric.name)
    ).all()
    return [SeriesStats(*row) for row in rows]


def last_id(session: Session, job_id: str) -> int:
    return session.scalar(select(func.max(Metric.id)).where(Metric.job_id == job_id)) or 0


def points(
    session: Session, job_id: str, name: str, lo: int | None, hi: int | None
) -> list[tuple[int, float]]:
    rows = session.execute(
        select(Metric.step, Metric.value)
        .where(*_filtered(job_id, [name], lo, hi))
        .order_by(Metric.step, Metric.id)
    )
    return [(step, value) for step, value in rows]


def buckets(
    session: Session, job_id: str, series: SeriesStats, width: int, lo: int | None, hi: int | None
) -> list[Bucket]:
    """Equal-width step buckets, aggregated in SQL: one row per bucket comes back."""
    index = (Metric.step - series.first_step) // width  # integer division on every backend
    rows = session.execute(
        select(
            func.min(Metric.step),
            func.max(Metric.step),
            func.avg(Metric.value),
            func.min(Metric.value),
            func.max(Metric.value),
            func.count(),
        )
        .where(*_filtered(job_id, [series.name], lo, hi))
        .group_by(index)
        .order_by(func.min(Metric.step))
    ).all()
    return [
        Bucket(int(a), int(b), float(c), float(d), float(e), int(f)) for a, b, c, d, e, f in rows
    ]


def value_at(session: Session, job_id: str, name: str, step: int) -> float | None:
    return session.scalar(
        select(Metric.value)
        .where(Metric.job_id == job_id, Metric.name == name, Metric.step == step)
        .order_by(Metric.id.desc())
        .limit(1)
    )


def best_step(
    session: Session, job_id: str, name: str, target: float, lo: int | None, hi: int | None
) -> int | None:
    return session.scalar(
        select(func.min(Metric.step)).where(
            *_filtered(job_id, [name], lo, hi), Metric.value == target
        )
    )
