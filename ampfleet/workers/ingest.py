"""What the node agent forwards to the database: rank 0's records (state, progress,
metrics, events) and every rank's log lines, in batches, within per-job volume limits.

Past a limit the excess is dropped and counted on the job, one event says so, and the
job keeps running: a chatty job must not be able to fill the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ampfleet.core import webhooks
from ampfleet.core.bulk import insert_rows
from ampfleet.core.lifecycle import record_event, transition
from ampfleet.core.models import Job, LogLine, Metric, utcnow
from ampfleet.core.settings import Settings
from ampfleet.core.states import JobState
from ampfleet.workers.rundir import LineTail, RunDir

METRIC_COLUMNS = ("job_id", "attempt", "step", "name", "value", "time")
LOG_COLUMNS = ("job_id", "attempt", "rank", "stream", "time", "line")


@dataclass
class AttemptFeed:
    """Where one attempt's output is read from, and what it said that the agent needs."""

    run_dir: RunDir
    tails: dict[Path, LineTail] = field(default_factory=dict)
    preempted_at_step: int | None = None

    def new_log_lines(self) -> list[tuple[int, str, bytes]]:
        lines = []
        for rank, stream, path in self.run_dir.rank_logs():
            tail = self.tails.setdefault(path, LineTail(path))
            lines += [(rank, stream, line) for line in tail.read_lines()]
        return lines


def apply_records(
    session: Session,
    job: Job,
    attempt: int,
    records: list[dict[str, Any]],
    feed: AttemptFeed,
    settings: Settings,
) -> None:
    now = utcnow()
    metric_rows: list[tuple[Any, ...]] = []
    latest = dict(job.latest_metrics or {})
    for record in records:
        kind = record.get("kind")
        if kind == "started":
            transition(
                session,
                job.id,
                JobState.RUNNING,
                from_states={JobState.STARTING},
                attempt=attempt,
                reason="ranks_started",
                message=started_message(record),
                precision=record["precision"],
                allreduce_dtype=record["allreduce_dtype"],
                total_steps=record["total_steps"],
                started_at=job.started_at or now,
            )
        elif kind == "metrics":
            for name, value in record["values"].items():
                metric_rows.append((job.id, attempt, record["step"], name, float(value), now))
                latest[name] = float(value)
        elif kind == "progress":
            job.step = int(record["step"])
            job.total_steps = int(record["total_steps"])
        elif kind == "event":
            record_event(session, job, record["reason"], record["message"])
        elif kind == "preempted":
            feed.preempted_at_step = int(record["step"])
        elif kind == "setup":
            job.precision = record["precision"]
            job.allreduce_dtype = record["allreduce_dtype"]
    if metric_rows:
        kept = _within_limit(
            session,
            job,
            len(metric_rows),
            settings.max_metric_points_per_job,
            used="metric_points",
            dropped="metric_points_dropped",
            what="metric points",
        )
        insert_rows(session, Metric.__table__, METRIC_COLUMNS, metric_rows[:kept])  # type: ignore[arg-type]
        job.latest_metrics = latest
        webhooks.metrics_landed(
            session,
            project=job.project,
            job_id=job.id,
            values=((row[3], row[2], row[4]) for row in metric_rows[:kept]),
        )
    session.flush()


def ship_logs(
    session: Session, job: Job, attempt: int, feed: AttemptFeed, settings: Settings
) -> None:
    lines = feed.new_log_lines()
    if not lines:
        return
    now = utcnow()
    limit = settings.max_log_line_bytes
    rows = [
        (job.id, attempt, rank, stream, now, raw[:limit].decode("utf-8", "replace"))
        for rank, stream, raw in lines
    ]
    budget = settings.max_log_bytes_per_job - job.log_bytes
    kept, size = 0, 0
    for row in rows:
        if size + len(row[5]) > budget:
            break
        size += len(row[5])
        kept += 1
    if kept < len(rows):
        if job.log_lines_dropped == 0:  # the first line dropped: say so, once
            record_event(
                session,
                job,
                "log_limit_reached",
                f"log volume reached {settings.max_log_bytes_per_job} bytes; further lines "
                "are dropped and counted (the job keeps running)",
            )
        job.log_lines_dropped += len(rows) - kept
    job.log_bytes += size
    insert_rows(session, LogLine.__table__, LOG_COLUMNS, rows[:kept])  # type: ignore[arg-type]


def _within_limit(
    session: Session, job: Job, count: int, limit: int, *, used: str, dropped: str, what: str
) -> int:
    """How many of `count` new items fit under the job's limit; counts the rest."""
    already: int = getattr(job, used)
    kept = max(0, min(count, limit - already))
    if kept < count:
        if already < limit:
            record_event(
                session,
                job,
                f"{what.replace(' ', '_')}_limit_reached",
                f"{what} reached the limit of {limit}; more are dropped and counted "
                "(the job keeps running)",
            )
        setattr(job, dropped, getattr(job, dropped) + count - kept)
    setattr(job, used, already + kept)
    return kept


def started_message(record: dict[str, Any]) -> str:
    resumed = record.get("resumed_from_step") or 0
    where = f", resumed at step {resumed}" if resumed else ""
    return (
        f"{record['world_size']} ranks on {record['backend']}, {record['precision']} compute, "
        f"{record['allreduce_dtype']} AllReduce{where}"
    )
