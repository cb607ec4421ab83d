"""What rank 0 writes is hostile input to the node agent (both backends, the real supervisor
sync and uploader): forged artifact records naming the admin key, /etc/shadow, the worker's
/proc environ, another job's folder or a FIFO upload nothing; malformed records of every
kind are rejected with an event naming file, line and reason; a fuzz of random and hostile
lines never stops the agent; and all the while another job on the same node reports every
one of its points and log lines."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Artifact, Job, JobEvent, LogLine, Metric
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from ampfleet.workers.attempts import LaunchRequest, RunningAttempt
from ampfleet.workers.ingest import MAX_REJECTION_EVENTS
from ampfleet.workers.rundir import RecordReader, RecordWriter, RunDir
from ampfleet.workers.supervisor import Supervisor
from ampfleet.workers.telemetry import RankTelemetry
from tests.support.factories import insert_job

MALFORMED = [
    b'{"kind": "metrics", "step": "notanint", "values": {"loss": 1.0}}',
    b'{"kind": "metrics", "step": 3, "values": {"loss": "high"}}',
    b'{"kind": "metrics", "step": 3, "values": {"loss": [1.0]}}',
    b'{"kind": "metrics", "step": -1, "values": {}}',
    b'{"kind": "metrics", "step": 3, "values": {"' + b"x" * 300 + b'": 1.0}}',
    b'{"kind": "progress", "step": 3, "total_steps": "all"}',
    b'{"kind": "progress", "step": 1e400, "total_steps": 3}',
    b'{"kind": "setup", "precision": "' + b"b" * 40 + b'", "allreduce_dtype": "bf16"}',
    b'{"kind": "usage", "step": 1}',
    b'{"kind": "event", "reason": "x", "message": "' + b"m" * 20_000 + b'"}',
    b'{"kind": "event", "reason": "x", "message": "a\\u0000b"}',
    b'{"kind": "event", "reason": "x", "message": "\\ud800"}',
    b'{"kind": "compute", "step_flops": "many", "message": "m"}',
    b'{"kind": "rewound", "step": null}',
    b'{"kind": "preempted"}',
    b'{"kind": "profile", "profile_id": "../../x", "state": "uploading"}',
    b'{"kind": "artifact", "artifact_kind": "output", "name": "../../etc", "paths": ["/a"]}',
    b'{"kind": "artifact", "artifact_kind": "model", "name": "outputs/x", "paths": ["/a"]}',
    b'{"kind": "artifact", "artifact_kind": "sample", "name": "samples/step-000000002.txt", '
    b'"step": 3, "paths": ["/a"]}',
    b'{"kind": "nonsense"}',
    b"[1, 2, 3]",
    b"not json at all",
    b"[" * 100_000,
]


@pytest.fixture
def supervisor(backend: str) -> Iterator[Supervisor]:
    node = Supervisor(get_settings())
    node.uploads.start()
    yield node
    node.uploads.stop(timeout=30)


def _attempt(supervisor: Supervisor, job_id: str) -> RunningAttempt:
    settings = get_settings()
    run_dir = RunDir.for_attempt(settings.runs_dir, job_id, 1, 0)
    run_dir.logs_dir.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    request = LaunchRequest(
        job_id,
        1,
        0,
        1,
        1,
        None,
        run_dir,
        None,
        hang_timeout_s=3600,
        checkpoint_dir=settings.checkpoints_dir / job_id,
    )
    attempt = RunningAttempt(
        request,
        sleeper,
        open(os.devnull, "wb"),  # noqa: SIM115 - closed with the attempt
        RecordReader(run_dir.events_file),
        RankTelemetry(sleeper.pid, settings.telemetry_interval_s),
    )
    supervisor._running[attempt.key] = attempt
    return attempt


def _append(run_dir: RunDir, lines: list[bytes]) -> None:
    with run_dir.events_file.open("ab") as file:
        file.write(b"".join(line + b"\n" for line in lines))


def _healthy_steps(run_dir: RunDir, steps: range) -> None:
    writer = RecordWriter(run_dir.events_file, flush_s=0.0)
    with run_dir.rank_log(0, "stdout").open("a") as log:
        for step in steps:
            writer.write("metrics", step=step, values={"loss": 1.0 / step})
            writer.write("progress", step=step, total_steps=1000)
            log.write(f"step {step}\n")
    writer.close()


def _count(model: type, job_id: str) -> int:
    with session_scope() as session:
        query = select(func.count()).select_from(model).where(model.job_id == job_id)  # type: ignore[attr-defined]
        return session.scalar(query) or 0


def _rejections(job_id: str) -> list[str]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(JobEvent.message).where(
                    JobEvent.job_id == job_id,
                    JobEvent.reason.in_(["record_rejected", "artifact_refused"]),
                )
            )
        )


def _stop(attempts: list[RunningAttempt]) -> None:
    for attempt in attempts:
        attempt.process.kill()
        attempt.process.wait()
        attempt.launcher_log.close()


def test_forged_records_upload_nothing_and_bad_ones_stop_nothing(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    settings = get_settings()
    hostile_id = insert_job(state=JobState.RUNNING, attempt=1)
    healthy_id = insert_job(state=JobState.RUNNING, attempt=1)
    hostile, healthy = _attempt(supervisor, hostile_id), _attempt(supervisor, healthy_id)
    try:
        run = hostile.request.run_dir.path
        admin_key = settings.data_dir.resolve() / "admin.key"
        admin_key.write_text("ampf_admin_secret")
        os.mkfifo(run / "outputs.fifo")
        os.symlink(admin_key, run / "linked.key")
        other = healthy.request.run_dir.path / "events.jsonl"
        forged_paths = [
            str(admin_key),
            "/etc/shadow",
            f"/proc/{os.getpid()}/environ",
            str(other),  # another job's folder
            str(run / "outputs.fifo"),
            str(run / "linked.key"),
            str(run / ".." / ".." / ".." / healthy_id / "attempt-1" / "node-0" / "events.jsonl"),
        ]
        forged = [
            json.dumps(
                {
                    "kind": "artifact",
                    "artifact_kind": "output",
                    "name": f"outputs/x{n}.bin",
                    "paths": [path],
                    "step": None,
                }
            ).encode()
            for n, path in enumerate(forged_paths)
        ]
        checkpoint = {
            "kind": "artifact",
            "artifact_kind": "checkpoint",
            "name": "checkpoint-000000001",
            "paths": [str(settings.data_dir.resolve()), "/etc/shadow"],
            "step": 1,
        }
        _append(hostile.request.run_dir, [*forged, json.dumps(checkpoint).encode(), *MALFORMED])
        for passes in range(1, 21):
            _healthy_steps(healthy.request.run_dir, range(passes * 10 - 9, passes * 10 + 1))
            supervisor._sync()
        deadline = time.monotonic() + 60
        while not supervisor.uploads.settled(hostile.key) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _stop([hostile, healthy])
    assert _count(Metric, healthy_id) == 200
    assert _count(LogLine, healthy_id) == 200
    assert _count(Artifact, hostile_id) == 0
    assert _count(Metric, hostile_id) == 0
    told = _rejections(hostile_id)
    assert sum("not uploaded" in m for m in told) == len(forged_paths) + 1
    named = [m for m in told if "events.jsonl line" in m]
    assert len(named) == min(len(MALFORMED), MAX_REJECTION_EVENTS)  # then they are counted
    first_malformed_line = len(forged) + 2
    assert any(f"events.jsonl line {first_malformed_line}:" in m for m in named)
    with session_scope() as session:
        job = session.get(Job, hostile_id)
        assert job is not None
        assert job.records_rejected >= len(MALFORMED) + len(forged_paths)
        assert job.state == JobState.RUNNING  # nothing essential was rejected


def test_a_fuzz_of_random_and_hostile_lines_never_stops_the_node(supervisor: Supervisor) -> None:
    generator = random.Random(20261202)
    hostile = _attempt(supervisor, insert_job(state=JobState.RUNNING, attempt=1))
    healthy_id = insert_job(state=JobState.RUNNING, attempt=1)
    healthy = _attempt(supervisor, healthy_id)
    kinds = ["metrics", "progress", "usage", "event", "artifact", "profile", "setup", "rewound"]
    values: list[object] = [None, -1, 2**70, 1.5, "x", "\u0000", [], {}, {"a": [1]}, True, "/etc"]
    try:
        for passes in range(1, 11):
            lines = []
            for _ in range(200):
                if generator.random() < 0.3:
                    noise = bytes(generator.randrange(256) for _ in range(generator.randrange(80)))
                    lines.append(noise.replace(b"\n", b""))
                    continue
                record: dict[str, object] = {"kind": generator.choice(kinds)}
                for field in ("step", "values", "paths", "name", "message", "reason", "state"):
                    if generator.random() < 0.5:
                        record[field] = generator.choice(values)
                lines.append(json.dumps(record).encode())
            _append(hostile.request.run_dir, lines)
            _healthy_steps(healthy.request.run_dir, range(passes * 10 - 9, passes * 10 + 1))
            supervisor._sync()
    finally:
        _stop([hostile, healthy])
    assert _count(Metric, healthy_id) == 100
    assert _count(LogLine, healthy_id) == 100


def test_non_finite_values_are_no_points_and_spoil_no_other(supervisor: Supervisor) -> None:
    """A skipped step's loss is inf, a diverged run's NaN: the record stands (its other
    values are the step's facts), its non-finite values are stored as no point, on either
    backend (SQLite reads NaN back as NULL), and nothing is called rejected."""
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    attempt = _attempt(supervisor, job_id)
    try:
        _append(
            attempt.request.run_dir,
            [
                b'{"kind": "metrics", "step": 4, "values": {"loss": Infinity, "skipped_steps": 1}}',
                b'{"kind": "metrics", "step": 5, "values": {"loss": NaN, "loss_scale": 2.0}}',
                b'{"kind": "metrics", "step": 6, "values": {"loss": -Infinity}}',
                b'{"kind": "metrics", "step": 7, "values": {"loss": 0.5}}',
            ],
        )
        supervisor._sync()
    finally:
        _stop([attempt])
    with session_scope() as session:
        stored = session.execute(
            select(Metric.step, Metric.name, Metric.value).where(Metric.job_id == job_id)
        ).all()
        job = session.get(Job, job_id)
        assert job is not None
        assert job.records_rejected == 0
        assert job.latest_metrics == {"loss": 0.5, "skipped_steps": 1.0, "loss_scale": 2.0}
    assert sorted(stored) == [(4, "skipped_steps", 1.0), (5, "loss_scale", 2.0), (7, "loss", 0.5)]
    assert _rejections(job_id) == []
