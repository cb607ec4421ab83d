"""What jobs reported, counted: every job's series must hold exactly one point per logging
step from the first to the last (no gap, no duplicate) across all its attempts, and rank 0's
per-step log lines must arrive in full."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from sqlalchemy import create_engine, select

from ampfleet.core.models import Job, LogLine, Metric

STEP_LINE = re.compile(r"^step (\d+)/(\d+) loss ")


def expected_steps(log_every: int, total: int) -> list[int]:
    """The loop reports every `log_every` steps and the last step."""
    return sorted({*range(log_every, total + 1, log_every), total})


@dataclass
class Reported:
    jobs: int = 0
    points_missing: dict[str, list[int]] = field(default_factory=dict)
    points_repeated: dict[str, list[int]] = field(default_factory=dict)
    log_lines_missing: dict[str, list[int]] = field(default_factory=dict)
    log_lines_repeated: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def missing_points(self) -> int:
        return sum(len(steps) for steps in self.points_missing.values())

    def summary(self) -> str:
        return (
            f"{self.jobs} jobs: metric points lost {self.missing_points}, repeated "
            f"{sum(len(s) for s in self.points_repeated.values())}; log lines lost "
            f"{sum(len(s) for s in self.log_lines_missing.values())}, repeated within an "
            f"attempt {sum(len(s) for s in self.log_lines_repeated.values())}"
        )

    def assert_complete(self) -> None:
        assert (
            self.points_missing,
            self.points_repeated,
            self.log_lines_missing,
            self.log_lines_repeated,
        ) == ({}, {}, {}, {}), self.summary()


def count_reported(database_url: str, job_ids: list[str], *, metric: str = "loss") -> Reported:
    """Checks the stored series of `metric` and rank 0's "step N/T loss" stdout lines. A
    step's line may come from more than one attempt (a resumed attempt replays the steps
    after its checkpoint), never twice from one."""
    engine = create_engine(database_url)
    reported = Reported(jobs=len(job_ids))
    try:
        with engine.connect() as conn:
            for job_id in job_ids:
                resolved, total = conn.execute(
                    select(Job.resolved, Job.total_steps).where(Job.id == job_id)
                ).one()
                expected = expected_steps(resolved["log_every_steps"], total)
                points = Counter(
                    conn.scalars(
                        select(Metric.step).where(Metric.job_id == job_id, Metric.name == metric)
                    )
                )
                _note(reported.points_missing, job_id, sorted(set(expected) - set(points)))
                _note(
                    reported.points_repeated, job_id, sorted(s for s, n in points.items() if n > 1)
                )
                per_attempt: dict[int, Counter[int]] = defaultdict(Counter)
                for attempt, line in conn.execute(
                    select(LogLine.attempt, LogLine.line).where(
                        LogLine.job_id == job_id, LogLine.rank == 0, LogLine.stream == "stdout"
                    )
                ):
                    if match := STEP_LINE.match(line):
                        per_attempt[attempt][int(match.group(1))] += 1
                seen = set().union(*per_attempt.values()) if per_attempt else set()
                _note(reported.log_lines_missing, job_id, sorted(set(expected) - seen))
                _note(
                    reported.log_lines_repeated,
                    job_id,
                    sorted((a, s) for a, c in per_attempt.items() for s, n in c.items() if n > 1),
                )
    finally:
        engine.dispose()
    return reported


def _note(found: dict, job_id: str, items: list) -> None:
    if items:
        found[job_id] = items
