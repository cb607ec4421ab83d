"""The node agent records how an attempt ended as soon as its ranks have exited: the pass that
sees the exit reads what they wrote, commits it, and records the end right after, whatever
the interval between passes (both backends)."""

from __future__ import annotations

import os
import subprocess
import uuid

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job
from ampfleet.core.settings import get_settings
from ampfleet.workers.attempts import LaunchRequest, RunningAttempt
from ampfleet.workers.rundir import RecordReader, RunDir
from ampfleet.workers.supervisor import Supervisor
from ampfleet.workers.telemetry import RankTelemetry
from ampfleet.workers.training.entry import write_failure


def _starting_job() -> str:
    job_id = f"job_{uuid.uuid4().hex[:12]}"
    with session_scope() as session:
        session.add(
            Job(
                id=job_id,
                project="default",
                recipe="bundle:bnd_x",
                spec={},
                resolved={},
                state="STARTING",
                priority=0,
                attempt=1,
                gang_size=2,
            )
        )
    return job_id


def test_an_attempt_whose_ranks_failed_ends_at_the_first_pass_after_their_exit(
    backend: str,
) -> None:
    settings = get_settings()
    job_id = _starting_job()
    run_dir = RunDir.for_attempt(settings.runs_dir, job_id, 1, 0)
    run_dir.logs_dir.mkdir(parents=True)
    write_failure(run_dir, 0, ModuleNotFoundError("No module named 'not_installed'"))
    launcher = subprocess.Popen(["false"], start_new_session=True)
    launcher.wait()
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
            launcher,
            launcher_log,
            RecordReader(run_dir.events_file),
            RankTelemetry(launcher.pid, settings.telemetry_interval_s),
        )
        supervisor = Supervisor(settings)
        supervisor._running[attempt.key] = attempt
        # The loop passes at once for an exit, not at its next interval...
        assert supervisor._newly_exited()
        supervisor._sync()
    # ... and that one pass records the end: no second interval to wait for.
    assert attempt.key not in supervisor._running
    assert not supervisor._newly_exited()
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "FAILED"
        assert job.failure_reason == (
            "rank 0: ModuleNotFoundError: No module named 'not_installed'"
        )
