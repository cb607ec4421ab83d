"""What the node agent forwards to the database: rank 0's records (state, progress,
metrics, events) and every rank's log lines, in batches, within per-job volume limits.

Past a limit the excess is dropped and counted on the job, one event says so, and the
job keeps running: a chatty job must not be able to fill the database.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from ampfleet.core import counters, goodput, profiles, webhooks
from ampfleet.core.bulk import insert_rows
from ampfleet.core.db import database_unavailable
from ampfleet.core.lifecycle import record_event, transition
from ampfleet.core.models import Job, LogLine, Metric, Profile, utcnow
from ampfleet.core.settings import Settings, get_settings
from ampfleet.core.states import JobState
from ampfleet.workers import start_phases
from ampfleet.workers.pruning_wake import wake_on_pruning_point
from ampfleet.workers.records import SCRIPT_OWNED, Rejected
from ampfleet.workers.rundir import ForwardedOffsets, LineTail, RecordReader, RunDir
from ampfleet.workers.series import Point, Points, delete_after, not_stored

METRIC_COLUMNS = ("job_id", "attempt", "step", "name", "value", "time")
LOG_COLUMNS = ("job_id", "attempt", "rank", "stream", "time", "line")
MAX_REJECTION_EVENTS = 20
"""Rejected records told as events, per attempt; more are counted on the job."""
MAX_ADOPTION_READS = 10_000  # chunks per file when taking over a dead agent's folder
_ATTEMPT_FOLDER = re.compile(r"^attempt-(\d+)$")


class AttemptFeed:
    """Where one attempt's output is read from, and what it said that the agent needs.

    Reading is transactional: what the readers return is stored by the caller's database
    transaction, and `commit` (after that transaction committed) or `rollback` (after it
    failed) decides whether the next pass continues after it or reads it again. The
    committed positions are also written into the folder (ForwardedOffsets), so the agent
    of a later attempt can store what this one's agent never did.
    """

    def __init__(self, run_dir: RunDir, records: RecordReader | None = None) -> None:
        self.run_dir = run_dir
        self._offsets = ForwardedOffsets(run_dir)
        self._saved = self._offsets.load()
        self.records = records or RecordReader(
            run_dir.events_file, self._saved.get(run_dir.events_file, 0), root=run_dir.path
        )
        self.tails: dict[Path, LineTail] = {}
        self.preempted_at_step: int | None = None
        self.adopted: list[AttemptFeed] = []
        """Earlier attempts' folders whose output this pass stores: they commit with it."""
        self.artifacts: list[dict[str, Any]] = []
        """`artifact` records read: the uploader takes them once the pass committed."""
        self.rejections = 0
        """Records of this attempt rejected so far (events name the first few)."""
        self.launched_at: float | None = None
        """When this node's agent launched the ranks (wall clock): where their start
        began, for the `start_phases` event; unknown for a folder it took over."""
        self.start_path: start_phases.StartPath | None = None
        """How the agent launched them (warm or cold, and why), for the same event."""

    def new_log_lines(self) -> list[tuple[int, str, bytes]]:
        lines = []
        for rank, stream, path in self.run_dir.rank_logs():
            tail = self.tails.get(path)
            if tail is None:
                offset = self._saved.get(path, 0)
                tail = self.tails[path] = LineTail(path, offset=offset, root=self.run_dir.path)
            lines += [(rank, stream, line) for line in tail.read_lines()]
        return lines

    def commit(self) -> None:
        tails = [self.records, *self.tails.values()]
        if any(tail.moved for tail in tails):
            for tail in tails:
                tail.commit()
            self._offsets.save(tails)
        for earlier in self.adopted:
            earlier.commit()
        self.adopted.clear()

    def rollback(self) -> None:
        for tail in (self.records, *self.tails.values()):
            tail.rollback()
        self.adopted.clear()  # the replayed records adopt them again
        self.artifacts.clear()  # read again with the records

    def take_artifacts(self) -> list[dict[str, Any]]:
        taken, self.artifacts = self.artifacts, []
        return taken


def apply_records(
    session: Session,
    job: Job,
    attempt: int,
    records: list[dict[str, Any]],
    feed: AttemptFeed,
    settings: Settings,
) -> None:
    points = Points()
    latest = dict(job.latest_metrics or {})
    for record in records:
        kind = record.get("kind")
        if kind == "started":
            ranks_started(session, job, attempt, record, feed, settings)
        elif kind == "metrics":
            latest.update(_add_metrics(points, record))
        elif kind == "rewound":  # a precision fallback went back to an earlier checkpoint
            points.rewind(int(record["step"]))
            delete_after(session, job, int(record["step"]))
        elif kind == "progress":
            job.step = int(record["step"])
            job.total_steps = record["total_steps"]  # None: a runtime-only job
        elif kind == "usage":  # where the attempt's time went: goodput's half from the loop
            goodput.record_usage(session, job.id, attempt, record)
        elif kind in ("event", "compute"):  # compute: FLOPs per step and the peak MFU uses
            record_event(session, job, record.get("reason", kind), record["message"])
        elif kind == "preempted":
            feed.preempted_at_step = int(record["step"])
        elif kind == "artifact":  # uploaded and listed by the agent, off this transaction
            feed.artifacts.append(record)
        elif kind == "setup":
            job.precision = record["precision"]
            job.allreduce_dtype = record["allreduce_dtype"]
        elif kind == "start_phases":
            ends, warm = record["ends"], record["warm"]
            message = start_phases.describe(ends, warm, feed.launched_at, feed.start_path)
            record_event(session, job, "start_phases", message)
    if store_points(session, job, attempt, points.items(), settings):
        job.latest_metrics = latest
    apply_profile_reports(session, job, [r for r in records if r.get("kind") == "profile"])
    session.flush()


def _add_metrics(points: Points, record: dict[str, Any]) -> dict[str, float]:
    """Adds a metrics record's points; the values held (finite ones), for latest_metrics."""
    step = int(record["step"])
    return {
        name: float(value)
        for name, value in record["values"].items()
        if points.add(step, name, float(value))
    }


def apply_one_by_one(
    session: Session,
    job: Job,
    attempt: int,
    records: list[dict[str, Any]],
    feed: AttemptFeed,
    settings: Settings,
) -> None:
    """`apply_records` for an attempt whose passes keep failing: each record under a
    savepoint of its own, so the one that fails (for what it holds, not for the database)
    is rejected with an event and the others are stored."""
    for record in records:
        artifacts, adopted = len(feed.artifacts), len(feed.adopted)
        try:
            with session.begin_nested():
                apply_records(session, job, attempt, [record], feed, settings)
        except Exception as exc:
            if database_unavailable(exc):
                raise
            del feed.artifacts[artifacts:], feed.adopted[adopted:]
            reason = f"storing it failed: {type(exc).__name__}"
            record_event(session, job, "record_rejected", f"a {record['kind']!r} record: {reason}")
            count_rejected(session, job.id, 1)


def count_rejected(session: Session, job_id: str, count: int) -> None:
    """In the database, not on a loaded row: the uploader counts refusals concurrently."""
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(records_rejected=Job.records_rejected + count)
        .execution_options(synchronize_session=False)
    )


def report_rejections(
    session: Session, job: Job, feed: AttemptFeed, rejected: list[Rejected]
) -> Rejected | None:
    """Tells the job which of its records were rejected and why (the first few, then how
    many more); returns the first essential one, which the attempt cannot go on without."""
    for rejection in rejected:
        feed.rejections += 1
        if feed.rejections <= MAX_REJECTION_EVENTS:
            more = (
                f"; further rejections are counted, not told (after {MAX_REJECTION_EVENTS})"
                if feed.rejections == MAX_REJECTION_EVENTS
                else ""
            )
            name = feed.run_dir.events_file.name
            record_event(session, job, "record_rejected", rejection.describe(name) + more)
    if rejected:
        count_rejected(session, job.id, len(rejected))
    return next((r for r in rejected if r.essential), None)


def ranks_started(
    session: Session,
    job: Job,
    attempt: int,
    record: dict[str, Any],
    feed: AttemptFeed,
    settings: Settings,
) -> None:
    """The attempt's ranks are up: what earlier attempts computed past its resume point is
    theirs no more (their points go, their step-seconds count as recomputed), and it runs."""
    resumed = int(record.get("resumed_from_step") or 0)
    delete_after(session, job, resumed)
    adopt_earlier_attempts(session, job, attempt, resumed, feed, settings)
    goodput.settle_before(session, job.id, attempt, resumed)
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
        started_at=job.started_at or utcnow(),
    )


def apply_profile_reports(session: Session, job: Job, reports: list[dict[str, Any]]) -> None:
    """A profile's capture began, ended or failed (core/profiles.py); its end is an event.
    Only the job's own profiles: a rank names the profile, and could name another job's."""
    for report in reports:
        profile = session.get(Profile, report["profile_id"])
        if profile is None or profile.job_id != job.id:
            record_event(
                session, job, "record_rejected", f"{report['profile_id']} is not this job's profile"
            )
            continue
        told = profiles.apply_report(session, report)
        if told:
            record_event(session, job, "profile", told)


def store_points(
    session: Session, job: Job, attempt: int, points: list[Point], settings: Settings
) -> bool:
    """Stores what fits under the job's limit; whether anything was offered at all."""
    if not points:
        return False
    kept = _within_limit(
        session,
        job,
        len(points),
        settings.max_metric_points_per_job,
        used="metric_points",
        dropped="metric_points_dropped",
        what="metric points",
    )
    now = utcnow()
    rows = [(job.id, attempt, step, name, value, now) for step, name, value in points[:kept]]
    insert_rows(session, Metric.__table__, METRIC_COLUMNS, rows)  # type: ignore[arg-type]
    counters.add(session, counters.METRIC_POINTS_INGESTED, len(rows), shard=settings.node_name)
    wake_on_pruning_point(session, job, {name for _, name, _ in points[:kept]})
    webhooks.metrics_landed(
        session,
        project=job.project,
        job_id=job.id,
        values=((name, step, value) for step, name, value in points[:kept]),
    )
    return True


def adopt_earlier_attempts(
    session: Session, job: Job, attempt: int, resumed: int, feed: AttemptFeed, settings: Settings
) -> None:
    """Store what earlier attempts' folders hold past their agents' last commit.

    An agent killed with its ranks leaves records and log lines on disk that it never
    stored; the checkpoint this attempt resumed from was published only after they were
    fsynced. Their points up to `resumed` are stored (skipping any already stored), the
    later ones are this attempt's to report again; their log lines are stored in full.
    Folders this node cannot see (runs folders not shared between nodes) stay unread.
    """
    job_dir = feed.run_dir.path.parent.parent
    for folder in sorted(job_dir.glob("attempt-*/node-*")):
        match = _ATTEMPT_FOLDER.match(folder.parent.name)
        if match is None or int(match.group(1)) >= attempt or not folder.is_dir():
            continue
        earlier = AttemptFeed(RunDir(folder))
        number = int(match.group(1))
        points = Points()
        for _ in range(MAX_ADOPTION_READS):
            records = earlier.records.read_new()
            if not records:
                break
            for record in records:
                if record.get("kind") == "metrics":
                    _add_metrics(points, record)
                elif record.get("kind") == "rewound":
                    points.rewind(int(record["step"]))
                elif record.get("kind") == "usage":
                    goodput.record_usage(session, job.id, number, record)
        missing = not_stored(session, job.id, points.items(up_to=resumed))
        store_points(session, job, number, missing, settings)
        for _ in range(MAX_ADOPTION_READS):
            if not ship_logs(session, job, number, earlier, settings):
                break
        feed.adopted.append(earlier)


def ship_logs(
    session: Session, job: Job, attempt: int, feed: AttemptFeed, settings: Settings
) -> int:
    """Every rank's new log lines, within the job's volume limit; how many were read."""
    lines = feed.new_log_lines()
    if lines:
        store_log_lines(session, job, attempt, lines, settings)
    return len(lines)


def store_setup_output(session: Session, job_id: str, attempt: int, output: list[str]) -> None:
    """What a setup step on the node prints before the ranks start (pip's output for
    code.requirements), as it comes, stored as rank 0's stdout lines of the attempt."""
    job = session.get(Job, job_id)
    if job is not None:
        lines = [(0, "stdout", f"[requirements] {line}".encode()) for line in output]
        store_log_lines(session, job, attempt, lines, get_settings())


def store_log_lines(
    session: Session,
    job: Job,
    attempt: int,
    lines: list[tuple[int, str, bytes]],
    settings: Settings,
) -> None:
    now = utcnow()
    limit = settings.max_log_line_bytes
    rows = [  # NUL: neither PostgreSQL's text nor a terminal wants it
        (job.id, attempt, rank, stream, now, _text(raw[:limit])) for rank, stream, raw in lines
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


def _text(raw: bytes) -> str:
    return raw.replace(b"\x00", b"\xef\xbf\xbd").decode("utf-8", "replace")


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
    if record["precision"] == SCRIPT_OWNED:
        return f"{record['world_size']} ranks running the job's command{where}"
    return (
        f"{record['world_size']} ranks on {record['backend']}, {record['precision']} compute, "
        f"{record['allreduce_dtype']} AllReduce{where}"
    )
