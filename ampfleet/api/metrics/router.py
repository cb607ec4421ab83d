"""A job's metric series, downsampled on the server: a million points come back as at
most `max_points` (min, max and mean per equal-width step bucket), with a summary; the
summary's best only for objectives (core/metric_goals.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.bounds import MAX_INT
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import UnprocessableError, responses
from ampfleet.api.jobs import service as jobs
from ampfleet.api.metrics import repository
from ampfleet.api.metrics.schemas import MetricPoint, MetricSeries, MetricsOut, SeriesSummary
from ampfleet.core.metric_goals import MetricDirection, metric_goal
from ampfleet.core.recipes import declared_metrics

router = APIRouter(prefix="/v1/jobs", tags=["metrics"])
MAX_NAMES = 50


@router.get(
    "/{job_id}/metrics",
    response_model=MetricsOut,
    responses=responses(401, 404, 422),
    summary="Metric series of a job, downsampled to at most max_points per series",
)
def job_metrics(
    job_id: str,
    session: SessionDep,
    principal: CurrentPrincipal,
    names: Annotated[str | None, Query(max_length=2000, description="Comma-separated.")] = None,
    from_step: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    to_step: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    max_points: Annotated[int, Query(ge=2, le=100_000)] = 1000,
) -> MetricsOut:
    job = jobs.get(session, job_id, principal)
    wanted = [n.strip() for n in names.split(",") if n.strip()] if names else []
    if len(wanted) > MAX_NAMES:
        raise UnprocessableError.for_field("names", f"at most {MAX_NAMES} names")
    if from_step is not None and to_step is not None and from_step > to_step:
        raise UnprocessableError.for_field("from_step", "must not be greater than to_step")
    # Read first: points that land while the series are read may then come twice (a
    # client keys points by step), never not at all.
    last_metric_id = repository.last_id(session, job_id)
    declared = declared_metrics(job.recipe)
    series = [
        _series(session, job_id, stats, from_step, to_step, max_points, declared)
        for stats in repository.stats(session, job_id, wanted, from_step, to_step)
    ]
    return MetricsOut(job_id=job_id, series=series, last_metric_id=last_metric_id)


def _series(
    session: Session,
    job_id: str,
    stats: repository.SeriesStats,
    lo: int | None,
    hi: int | None,
    max_points: int,
    declared: Mapping[str, MetricDirection],
) -> MetricSeries:
    if stats.count <= max_points:
        points = [
            MetricPoint(step=step, value=value)
            for step, value in repository.points(session, job_id, stats.name, lo, hi)
        ]
        downsampled = False
    else:
        width = max(1, math.ceil((stats.last_step - stats.first_step + 1) / max_points))
        points = [
            MetricPoint(step=b.step, value=b.mean, min=b.minimum, max=b.maximum, count=b.count)
            for b in repository.buckets(session, job_id, stats, width, lo, hi)
        ]
        downsampled = True
    goal = metric_goal(stats.name, declared)
    best = None if goal is None else stats.maximum if goal == "max" else stats.minimum
    return MetricSeries(
        name=stats.name,
        downsampled=downsampled,
        points=points,
        summary=SeriesSummary(
            count=stats.count,
            last=repository.value_at(session, job_id, stats.name, stats.last_step),
            last_step=stats.last_step,
            min=stats.minimum,
            max=stats.maximum,
            goal=goal,
            best=best,
            best_step=None
            if best is None
            else repository.best_step(session, job_id, stats.name, best, lo, hi),
        ),
    )
