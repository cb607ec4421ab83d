"""The numerics-aware pruner on a job's stored records (both backends): fp16's loss scale
collapsing, a precision or AllReduce fallback, steps skipped for non-finite gradients outside
fp16 (fp16's scaler skips a few by design), a run that failed on non-finite gradients, and
divergence; each with the reason a trial is pruned for, and nothing when the policy is off."""

from __future__ import annotations

from typing import Any

import pytest

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job
from ampfleet.core.states import JobState
from ampfleet.core.sweep_spec import Numerics
from ampfleet.scheduler.sweep_numerics import numerics_problem
from tests.support.factories import add_points, insert_job
from tests.support.sweeps import note


@pytest.fixture
def job_id(backend: str) -> str:
    return insert_job(state=JobState.RUNNING, attempt=1, procs_per_node=1)


def problem(job_id: str, precision: str = "bf16", **policy: Any) -> str | None:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.precision = precision
        return numerics_problem(session, job, Numerics(**policy))


def test_a_healthy_run_has_no_problem(job_id: str) -> None:
    add_points(job_id, "loss", [(10, 2.3), (20, 1.1), (30, 0.7)])
    add_points(job_id, "loss_scale", [(10, 65536.0), (20, 32768.0)])
    assert problem(job_id, "fp16") is None


def test_fp16s_loss_scale_collapsing_is_a_problem(job_id: str) -> None:
    add_points(job_id, "loss", [(10, 2.3), (20, 2.2), (30, 2.2)])
    add_points(job_id, "loss_scale", [(10, 65536.0), (20, 8.0), (30, 0.5)])
    assert problem(job_id, "fp16") == (
        "numerics: fp16 loss scale collapsed to 0.5 at step 30 (below 1)"
    )
    assert problem(job_id, "fp16", min_loss_scale=0.25) is None
    assert problem(job_id, "fp16", min_loss_scale=16) == (
        "numerics: fp16 loss scale collapsed to 8 at step 20 (below 16)"
    )


@pytest.mark.parametrize("reason", ["precision_fallback", "allreduce_fallback"])
def test_a_fallback_is_a_problem_unless_the_policy_keeps_it(job_id: str, reason: str) -> None:
    add_points(job_id, "loss", [(10, 2.3), (20, 1.9)])
    note(job_id, reason, "fp16 -> bf16 at step 14: gradients were non-finite for 8 steps")
    assert problem(job_id) == (
        f"numerics: {reason.replace('_', ' ')}: fp16 -> bf16 at step 14: gradients were "
        "non-finite for 8 steps"
    )
    assert problem(job_id, prune_on_fallback=False) is None


def test_skipped_steps_are_non_finite_losses_outside_fp16(job_id: str) -> None:
    add_points(job_id, "skipped_steps", [(10, 0.0), (20, 3.0), (30, 5.0)])
    assert problem(job_id, "bf16") == "numerics: loss went non-finite (3 steps skipped by step 20)"
    assert problem(job_id, "fp32") is not None
    assert problem(job_id, "fp16") is None  # the scaler skips steps while it finds its scale


def test_a_run_that_failed_on_non_finite_gradients_failed_for_its_numerics(job_id: str) -> None:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.state = JobState.FAILED.value
        job.failure_reason = (
            "gradients were non-finite for 3 steps in a row at step 40 under bf16; use fp32"
        )
    assert problem(job_id) == (
        "numerics: gradients were non-finite for 3 steps in a row at step 40 under bf16; use fp32"
    )


def test_divergence_is_measured_against_the_early_losses(job_id: str) -> None:
    add_points(job_id, "loss", [(5, 2.0), (10, 9.0), (15, 25.0)])
    assert problem(job_id) == (
        "numerics: diverged: loss 25 at step 15, over 10x 2, the lowest of its first 5 logged"
    )
    assert problem(job_id, divergence_factor=20) is None


def test_a_run_that_blew_up_before_its_first_log_still_diverges(job_id: str) -> None:
    """Its first logged loss is already thousands: measured against it alone, the run would
    go on for hundreds of steps before a loss rose 5x above it."""
    add_points(job_id, "loss", [(5, 4561.0), (10, 29.0), (15, 163.0), (20, 6.3)])
    assert problem(job_id, divergence_factor=5) == (
        "numerics: diverged: loss 163 at step 15, over 5x 29, the lowest of its first 5 logged"
    )


def test_a_fast_learner_is_not_measured_against_its_own_progress(job_id: str) -> None:
    falling = [(s, 2.3 / (1 + s)) for s in range(0, 200, 10)]  # down to 0.011
    add_points(job_id, "loss", [*falling, (200, 0.3)])  # a spike, under 10x the early losses
    assert problem(job_id) is None


def test_a_disabled_policy_sees_nothing(job_id: str) -> None:
    add_points(job_id, "loss_scale", [(10, 0.01)])
    add_points(job_id, "skipped_steps", [(10, 9.0)])
    note(job_id, "precision_fallback", "bf16 -> fp32")
    assert problem(job_id, "bf16") is not None
    assert problem(job_id, "bf16", enabled=False) is None
