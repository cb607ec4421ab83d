"""The figures a diagnosis reads: means of a job's metrics over its latest steps."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core.models import Metric

STEP_SERIES = "step_time_s"
"""Every reported step has it: its last step ends the window."""


def latest_means(
    session: Session, job_id: str, window_steps: int
) -> tuple[int, int, dict[str, float]]:
    """(reported steps in the window, its last step, name -> mean) over the last
    `window_steps` steps of the job's step series."""
    last = session.scalar(
        select(func.max(Metric.step)).where(Metric.job_id == job_id, Metric.name == STEP_SERIES)
    )
    if last is None:
        return 0, 0, {}
    rows = session.execute(
        select(Metric.name, func.avg(Metric.value), func.count())
        .where(Metric.job_id == job_id, Metric.step > last - window_steps, Metric.step <= last)
        .group_by(Metric.name)
    ).all()
    means = {name: float(mean) for name, mean, _ in rows}
    steps = next((int(count) for name, _, count in rows if name == STEP_SERIES), 0)
    return steps, int(last), means
