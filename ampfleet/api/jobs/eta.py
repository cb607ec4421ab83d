"""A running job's ETA: its pace over a window of its latest reports, and how far to trust it.

The pace since the run started counts the start-up (torch import, data, rendezvous, the FLOP
and peak probes) and any earlier attempt as if they were steps: a 5-minute charlm run showed
13 minutes at step 10. Here the pace is measured between the times the current attempt's
latest `loss` points were stored (WINDOW of them, one per logged step): the steady rate,
its evaluations and checkpoints included, its start-up left out.

Confidence says how much the window holds:
- high: at least HIGH_REPORTS reports, over at least HIGH_SPAN_S, whose first and second
  halves ran at paces within STEADY of each other;
- medium: at least two spans between reports;
- low: one span, or only the first report (then the pace is that step's own time, which
  leaves out evaluation and checkpoints).
A runtime-only job ends when its time is up: its ETA is what is left of it (high).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core.models import Allocation, Job, Metric
from ampfleet.core.spec import Stop
from ampfleet.core.states import JobState

Confidence = Literal["low", "medium", "high"]
WINDOW = 20
HIGH_REPORTS = 6
HIGH_SPAN_S = 20.0
STEADY = 0.10


@dataclass(frozen=True)
class Estimate:
    eta_seconds: float | None = None
    steps_per_s: float | None = None
    confidence: Confidence | None = None


NONE = Estimate()


def estimate(job: Job, now: datetime) -> Estimate:
    """Only while the job runs and has stepped (or, runtime-only, runs); read in the
    session the job was loaded in."""
    session = Session.object_session(job)
    if job.state != JobState.RUNNING or session is None:
        return NONE
    if job.total_steps is None:
        return _time_left(session, job, now)
    if not 0 < job.step < job.total_steps:
        return NONE
    reports = _reports(session, job)
    if len(reports) >= 2:
        return _paced(reports, job.total_steps, now)
    return _first_step_paced(session, job, now)


def _reports(session: Session, job: Job) -> list[tuple[datetime, int]]:
    """(time stored, step) of the window's reports, oldest first; points stored together
    (one pass of the node agent) count as one report, at their latest step."""
    rows = session.execute(
        select(Metric.time, Metric.step)
        .where(Metric.job_id == job.id, Metric.name == "loss", Metric.attempt == job.attempt)
        .order_by(Metric.step.desc())
        .limit(WINDOW)
    ).all()
    latest: dict[datetime, int] = {}
    for time, step in rows:
        latest[time] = max(step, latest.get(time, step))
    return sorted(latest.items())


def _pace(reports: list[tuple[datetime, int]]) -> float:
    (first_time, first_step), (last_time, last_step) = reports[0], reports[-1]
    seconds = (last_time - first_time).total_seconds()
    return (last_step - first_step) / seconds if seconds > 0 else 0.0


def _paced(reports: list[tuple[datetime, int]], total: int, now: datetime) -> Estimate:
    pace = _pace(reports)
    if pace <= 0:
        return NONE
    last_time, last_step = reports[-1]
    since = max((now - last_time).total_seconds(), 0.0)
    eta = max((total - last_step) / pace - since, 0.0)
    return Estimate(eta, pace, _confidence(reports, pace))


def _confidence(reports: list[tuple[datetime, int]], pace: float) -> Confidence:
    span = (reports[-1][0] - reports[0][0]).total_seconds()
    if len(reports) >= HIGH_REPORTS and span >= HIGH_SPAN_S:
        middle = len(reports) // 2
        halves = _pace(reports[: middle + 1]), _pace(reports[middle:])
        if abs(halves[0] - halves[1]) <= STEADY * pace:
            return "high"
    return "medium" if len(reports) >= 3 else "low"


def _first_step_paced(session: Session, job: Job, now: datetime) -> Estimate:
    """One report so far: paced by that step's own time (no evaluation, no checkpoint)."""
    row = session.execute(
        select(Metric.value, Metric.time)
        .where(Metric.job_id == job.id, Metric.name == "step_time_s", Metric.attempt == job.attempt)
        .order_by(Metric.step.desc())
        .limit(1)
    ).first()
    if row is None or row.value <= 0:
        return NONE
    pace = 1.0 / row.value
    remaining = ((job.total_steps or 0) - job.step) / pace
    since = max((now - row.time).total_seconds(), 0.0)
    return Estimate(max(remaining - since, 0.0), pace, "low")


def _time_left(session: Session, job: Job, now: datetime) -> Estimate:
    """A runtime-only job: what is left of its time, counted from its attempt's launch
    (as the node counts it); the final evaluation and export come after."""
    stop = Stop.model_validate(job.resolved["stop"])
    launched = session.scalar(
        select(func.min(Allocation.launched_at)).where(
            Allocation.job_id == job.id, Allocation.attempt == job.attempt
        )
    )
    if stop.max_runtime_s is None or launched is None:
        return NONE
    ends = launched + timedelta(seconds=stop.max_runtime_s)
    return Estimate(max((ends - now).total_seconds(), 0.0), None, "high")
