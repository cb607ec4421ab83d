"""Nothing a rank reports is lost or stored twice on its way to the database: not when the
transaction that stores it fails, not when an attempt resumes from a checkpoint, and not
when the agent that was forwarding an attempt dies with it (both backends)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from sqlalchemy import select, text, update

from ampfleet.core.db import get_engine, session_scope
from ampfleet.core.models import Job, LogLine, Metric
from ampfleet.core.settings import get_settings
from ampfleet.workers.attempts import LaunchRequest, RunningAttempt
from ampfleet.workers.ingest import AttemptFeed, apply_records, ship_logs
from ampfleet.workers.rundir import RecordReader, RecordWriter, RunDir
from ampfleet.workers.supervisor import Supervisor
from ampfleet.workers.telemetry import RankTelemetry

# A failing commit through a real database error: a trigger adds a row whose deferred
# foreign key can never be satisfied, so COMMIT itself fails after every statement of the
# pass has run (the hardest case: everything was applied, then rolled back).
BLOCKER = (
    "CREATE TABLE test_absent (id INTEGER PRIMARY KEY)",
    "CREATE TABLE test_fail_commits (flag INTEGER)",
    "CREATE TABLE test_blocker (ref INTEGER REFERENCES test_absent (id) "
    "DEFERRABLE INITIALLY DEFERRED)",
)
PG_TRIGGER = (
    "CREATE FUNCTION test_block() RETURNS trigger AS $$ BEGIN IF EXISTS (SELECT 1 FROM "
    "test_fail_commits) THEN INSERT INTO test_blocker VALUES (1); END IF; RETURN NULL; END "
    "$$ LANGUAGE plpgsql",
    *(
        f"CREATE TRIGGER test_block_{table} AFTER INSERT ON {table} FOR EACH STATEMENT "
        "EXECUTE FUNCTION test_block()"
        for table in ("metrics", "log_lines")
    ),
)
SQLITE_TRIGGER = tuple(
    f"CREATE TRIGGER test_block_{table} AFTER INSERT ON {table} WHEN EXISTS (SELECT 1 FROM "
    "test_fail_commits) BEGIN INSERT INTO test_blocker VALUES (1); END"
    for table in ("metrics", "log_lines")
)


@pytest.fixture
def failing_commits(backend: str) -> Iterator[None]:
    engine = get_engine()
    with engine.begin() as conn:
        for statement in (*BLOCKER, *(PG_TRIGGER if backend == "postgres" else SQLITE_TRIGGER)):
            conn.execute(text(statement))
    try:
        yield
    finally:
        with engine.begin() as conn:
            for table in ("metrics", "log_lines"):
                conn.execute(
                    text(
                        f"DROP TRIGGER IF EXISTS test_block_{table}"
                        + (f" ON {table}" if backend == "postgres" else "")
                    )
                )
            if backend == "postgres":
                conn.execute(text("DROP FUNCTION IF EXISTS test_block()"))
            for table in ("test_blocker", "test_fail_commits", "test_absent"):
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))


def _fail_commits(on: bool) -> None:
    with get_engine().begin() as conn:
        conn.execute(
            text(
                "INSERT INTO test_fail_commits VALUES (1)"
                if on
                else "DELETE FROM test_fail_commits"
            )
        )


def _running_job(attempt: int) -> str:
    job_id = f"job_{uuid.uuid4().hex[:12]}"
    with session_scope() as session:
        session.add(
            Job(
                id=job_id,
                project="default",
                recipe="digits",
                spec={},
                resolved={},
                state="RUNNING",
                priority=0,
                attempt=attempt,
                gang_size=2,
            )
        )
    return job_id


def _report(run_dir: RunDir, steps: range) -> None:
    run_dir.logs_dir.mkdir(parents=True, exist_ok=True)
    writer = RecordWriter(run_dir.events_file, flush_s=0.0)
    with run_dir.rank_log(0, "stdout").open("a") as log:
        for step in steps:
            writer.write("metrics", step=step, values={"loss": 1.0 / step})
            writer.write("progress", step=step, total_steps=100)
            log.write(f"step {step}/100\n")
    writer.close()


def _stored(job_id: str) -> tuple[Counter[tuple[int, int]], Counter[tuple[int, str]]]:
    with session_scope() as session:
        points = Counter(
            session.execute(
                select(Metric.attempt, Metric.step).where(
                    Metric.job_id == job_id, Metric.name == "loss"
                )
            )
        )
        lines = Counter(
            session.execute(select(LogLine.attempt, LogLine.line).where(LogLine.job_id == job_id))
        )
    return points, lines


def test_records_read_while_commits_fail_are_stored_once_afterwards(
    failing_commits: None,
) -> None:
    job_id = _running_job(attempt=1)
    settings = get_settings()
    run_dir = RunDir.for_attempt(settings.runs_dir, job_id, 1, 0)
    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        with open(os.devnull, "wb") as launcher_log:
            request = LaunchRequest(
                job_id,
                1,
                0,
                1,
                2,
                None,
                run_dir,
                None,
                hang_timeout_s=settings.hang_timeout_s,
                checkpoint_dir=settings.checkpoints_dir / job_id,
            )
            attempt = RunningAttempt(
                request,
                sleeper,
                launcher_log,
                RecordReader(run_dir.events_file),
                RankTelemetry(sleeper.pid, settings.telemetry_interval_s),
            )
            supervisor = Supervisor(settings)
            supervisor._running[attempt.key] = attempt
            _report(run_dir, range(1, 6))
            _fail_commits(True)
            supervisor._sync()  # the attempt's pass fails (and only its own)
            assert attempt.failed_passes == 1
            supervisor._sync()  # still failing, if it reads anything
            _report(run_dir, range(6, 11))
            _fail_commits(False)
            supervisor._sync()
            supervisor._sync()  # nothing new: nothing stored again
    finally:
        sleeper.kill()
        sleeper.wait()
    points, lines = _stored(job_id)
    assert points == Counter({(1, step): 1 for step in range(1, 11)})
    assert lines == Counter({(1, f"step {step}/100"): 1 for step in range(1, 11)})
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.step, job.metric_points, job.latest_metrics) == (10, 10, {"loss": 0.1})


def _forward(job_id: str, attempt: int, feed: AttemptFeed) -> None:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        apply_records(session, job, attempt, feed.records.read_new(), feed, get_settings())
        ship_logs(session, job, attempt, feed, get_settings())
    feed.commit()


def test_a_resumed_attempt_replaces_what_came_after_its_checkpoint_and_adopts_the_rest(
    backend: str,
) -> None:
    job_id = _running_job(attempt=2)
    runs = get_settings().runs_dir
    first, second = (RunDir.for_attempt(runs, job_id, n, 0) for n in (1, 2))
    # Attempt 1's agent stored steps 1-4, then died with its ranks; they had reached step 8
    # and checkpointed at step 6.
    _report(first, range(1, 5))
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(attempt=1))
    _forward(job_id, 1, AttemptFeed(first))
    _report(first, range(5, 9))
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(attempt=2))
    second.path.mkdir(parents=True)
    writer = RecordWriter(second.events_file, flush_s=0.0)
    writer.write(
        "started",
        resumed_from_step=6,
        total_steps=100,
        world_size=2,
        backend="gloo",
        precision="fp32",
        allreduce_dtype="fp32",
    )
    for step in (7, 8, 9, 10, 11):
        writer.write("metrics", step=step, values={"loss": 2.0})
    writer.write("rewound", step=9)  # a precision fallback to the checkpoint at step 9
    for step in (10, 11, 12):
        writer.write("metrics", step=step, values={"loss": 3.0})
    writer.close()
    _forward(job_id, 2, AttemptFeed(second))

    points, lines = _stored(job_id)
    assert points == Counter(
        {**{(1, step): 1 for step in range(1, 7)}, **{(2, step): 1 for step in range(7, 13)}}
    )
    assert lines == Counter({(1, f"step {step}/100"): 1 for step in range(1, 9)})
    with session_scope() as session:
        query = select(Metric.step, Metric.value).where(Metric.job_id == job_id, Metric.step > 9)
        values = dict(session.execute(query).all())
        job = session.get(Job, job_id)
        assert job is not None
        assert job.metric_points == 12
    assert values == {10: 3.0, 11: 3.0, 12: 3.0}
