"""One stored metric point per (job, step, name) across attempts: the newest timeline's.

A job replays steps whenever it goes back to a checkpoint: a resumed attempt continues from
its checkpoint's step S, and a precision fallback returns to the last good checkpoint within
the attempt. What the abandoned timeline reported past S is replaced, not kept beside the
replay: when a timeline resumes at S, the stored points past S are deleted (and taken off
the job's point count) and the replayed ones stored as they come. The replayed point is the
one consistent with the model the job ends with, and a series with two values at one step
cannot be plotted or compared. A client following the metrics stream sees the replayed
steps arrive again, with new ids.

Points up to S are covered by the checkpoint, so the resumed timeline never reports them
again: they are stored from the attempt that reported them (ingest.adopt_earlier_attempts).
"""

from __future__ import annotations

import math

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ampfleet.core.models import Job, Metric

Point = tuple[int, str, float]  # step, name, value


class Points:
    """A batch of points in report order, with the same rule applied within the batch."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, str], float] = {}

    def add(self, step: int, name: str, value: float) -> bool:
        """Whether the point is held. A non-finite value (the loss of a step skipped for
        overflow, a diverged run's) is a fact of the rank's report but no point: neither
        SQLite (NaN reads back as NULL) nor a JSON column stores it, and a JSON answer has no
        number for it. The step's other values still count, its skipped_steps among them."""
        if not math.isfinite(value):
            return False
        self._held.pop((step, name), None)  # reported again: the newest, in report order
        self._held[(step, name)] = value
        return True

    def rewind(self, step: int) -> None:
        self._held = {key: value for key, value in self._held.items() if key[0] <= step}

    def items(self, *, up_to: int | None = None) -> list[Point]:
        return [
            (step, name, value)
            for (step, name), value in self._held.items()
            if up_to is None or step <= up_to
        ]


def delete_after(session: Session, job: Job, step: int) -> None:
    """The stored points of an abandoned timeline: everything past the step it resumes at."""
    result = session.execute(
        delete(Metric)
        .where(Metric.job_id == job.id, Metric.step > step)
        .execution_options(synchronize_session=False)
    )
    removed = int(result.rowcount or 0)  # type: ignore[attr-defined]
    if removed:
        job.metric_points = max(0, (job.metric_points or 0) - removed)


def not_stored(session: Session, job_id: str, points: list[Point]) -> list[Point]:
    """The points whose (step, name) the job's series does not hold yet."""
    if not points:
        return []
    steps = [step for step, _, _ in points]
    stored = set(
        session.execute(
            select(Metric.step, Metric.name).where(
                Metric.job_id == job_id, Metric.step.between(min(steps), max(steps))
            )
        )
    )
    return [point for point in points if (point[0], point[1]) not in stored]
