"""The node agent records how an attempt ended as soon as its ranks have exited: the pass that
sees the exit reads what they wrote, commits it, and records the end right after, whatever
the interval between passes (both backends)."""

from __future__ import annotations

import os
import subprocess
import uuid

from sqlalchemy import select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job, JobEvent
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
                resolved={"retry": {"max_restarts": 1}},
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
    job_id = _starting_job()
    _ranks_failed(job_id, ModuleNotFoundError("No module named 'not_installed'"))
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "FAILED"
        assert job.failure_reason == (
            "rank 0: ModuleNotFoundError: No module named 'not_installed'"
        )


GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[10.0.0.2]:49552: Connection reset by peer. This is typically caused by a remote worker "
    "hanging or bugs in the application."
)


def test_ranks_that_lost_their_peers_are_retried_not_failed(backend: str) -> None:
    """A peer node died (killed outright): the ranks here fail in their collective with
    gloo's connection error, which is not their own failure; the attempt is retried."""
    job_id = _starting_job()
    try:
        raise RuntimeError("all_reduce failed") from RuntimeError(GLOO_RESET)
    except RuntimeError as lost:
        _ranks_failed(job_id, lost)
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "QUEUED"
        assert job.failure_reason is None
        reasons = [
            e.reason for e in session.scalars(select(JobEvent).where(JobEvent.job_id == job_id))
        ]
        assert "peer_lost" in reasons


def test_a_users_own_connection_error_is_still_its_failure(backend: str) -> None:
    job_id = _starting_job()
    _ranks_failed(job_id, ConnectionResetError("Connection reset by peer"))
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "FAILED"


def test_outcomes_held_wait_for_whoever_holds_them(backend: str) -> None:
    """An agent that asks Slurm why its step was signalled holds the outcomes meanwhile:
    ranks that Slurm signalled too are not ended as a failure before it knows."""
    job_id = _starting_job()
    _ranks_failed(job_id, ModuleNotFoundError("No module named 'x'"), held=True)
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "FAILED"


def test_a_multi_node_job_succeeds_when_rank_0s_node_is_done_not_another(
    backend: str,
) -> None:
    """The second node's ranks exit cleanly first: the job is not SUCCEEDED before rank 0's
    node (which exports and uploads the model) has ended too."""
    job_id = _starting_job()
    _ranks_exited(job_id, node_rank=1, nnodes=2)
    with session_scope() as session:
        assert session.scalar(select(Job.state).where(Job.id == job_id)) == "STARTING"
    _ranks_exited(job_id, node_rank=0, nnodes=2)
    with session_scope() as session:
        assert session.scalar(select(Job.state).where(Job.id == job_id)) == "SUCCEEDED"


def _ranks_failed(job_id: str, exc: BaseException, *, held: bool = False) -> None:
    """Rank 0 of the job's attempt 1 reported `exc` and exited; one supervisor pass (held:
    one with the outcomes held, which ends nothing, then one without)."""
    _ranks_exited(job_id, exc, held=held)


def _ranks_exited(
    job_id: str,
    exc: BaseException | None = None,
    *,
    held: bool = False,
    node_rank: int = 0,
    nnodes: int = 1,
) -> None:
    """The ranks of one node of the job's attempt 1 exited: with 1, rank 0 reporting `exc`,
    or with 0 where there is none; then the supervisor's passes as `_ranks_failed` says."""
    settings = get_settings()
    run_dir = RunDir.for_attempt(settings.runs_dir, job_id, 1, node_rank)
    run_dir.logs_dir.mkdir(parents=True)
    if exc is not None:
        write_failure(run_dir, 0, exc)
    launcher = subprocess.Popen(["true" if exc is None else "false"], start_new_session=True)
    launcher.wait()
    with open(os.devnull, "wb") as launcher_log:
        request = LaunchRequest(
            job_id,
            1,
            node_rank,
            nnodes,
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
        if held:
            supervisor.outcomes_held.set()
            supervisor._sync()
            assert attempt.key in supervisor._running
            with session_scope() as session:
                assert session.scalar(select(Job.state).where(Job.id == job_id)) == "STARTING"
            supervisor.outcomes_held.clear()
        else:
            # The loop passes at once for an exit, not at its next interval...
            assert supervisor._newly_exited()
        supervisor._sync()
    # ... and that one pass records the end: no second interval to wait for.
    assert attempt.key not in supervisor._running
    assert not supervisor._newly_exited()
