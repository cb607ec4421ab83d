"""Driving a sweep without a fleet: the controller's pass run in the test, and the trials'
jobs moved, reporting and holding slots as a node would have them (real database rows)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.states import JobState
from ampfleet.scheduler.sweeps import advance_sweeps
from tests.support.factories import add_node, add_points, job_spec

NODE = "sweep-node"


def sweep_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "base": job_spec(stop={"max_steps": 30}, eval_every_steps=10),
        "space": {
            "learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 1e-1},
            "precision": {"type": "categorical", "choices": ["bf16", "fp32"]},
        },
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "sampler": {"type": "random", "seed": 1},
        "pruner": {"type": "asha", "min_resource": 10, "reduction_factor": 2},
        "budget": {"max_trials": 5, "max_concurrent": 2},
    }
    spec.update(overrides)
    return spec


def controller_pass() -> None:
    with session_scope() as session:
        advance_sweeps(session, utcnow())


def trial_jobs(sweep_id: str) -> list[Job]:
    with session_scope() as session:
        jobs = list(session.scalars(select(Job).where(Job.sweep_id == sweep_id)))
        session.expunge_all()
    return sorted(jobs, key=lambda j: j.trial or 0)


def end_jobs(job_ids: Iterable[str], state: JobState = JobState.FAILED) -> None:
    with session_scope() as session:
        for job_id in job_ids:
            job = session.get(Job, job_id)
            assert job is not None
            job.state, job.failure_reason = state.value, "ended by the test"
            job.finished_at = utcnow()


def run(job_id: str, held_s: float = 0.0, *, precision: str | None = None) -> None:
    """The job RUNNING on one slot of the test's node, placed `held_s` seconds ago."""
    ensure_node()
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        placed = utcnow() - timedelta(seconds=held_s)
        job.state, job.attempt, job.scheduled_at = JobState.RUNNING.value, 1, placed
        job.precision = precision
        session.add(
            Allocation(
                job_id=job_id, attempt=1, node_id=NODE, node_rank=0, slots=1, created_at=placed
            )
        )


def ensure_node() -> None:
    with session_scope() as session:
        if session.get(Node, NODE) is not None:
            return
    add_node(NODE, slots=8, accelerator="cpu", gpu_model=None, gpu_memory_mb=None)


def note(job_id: str, reason: str, message: str) -> None:
    """An `info` event of the job's attempt, as the ingest writes one."""
    with session_scope() as session:
        session.add(JobEvent(job_id=job_id, attempt=1, kind="info", reason=reason, message=message))


SPEC = sweep_spec(pruner={"type": "none"}, budget={"max_trials": 2, "max_concurrent": 2})
"""Two trials at once and no pruner: the sweep that the SDK and CLI tests drive to its end
with `finish_trials`."""


def finish_trials(sweep_id: str) -> None:
    """Both trials run, report and succeed; the controller records them and ends the sweep."""
    controller_pass()
    for job in trial_jobs(sweep_id):
        run(job.id, held_s=5)
        add_points(job.id, "val_accuracy", [(30, 0.5 + 0.1 * (job.trial or 0))])
    end_jobs([j.id for j in trial_jobs(sweep_id)], JobState.SUCCEEDED)
    controller_pass()
