"""The numerics-aware pruner: a trial whose numbers went bad is stopped for that, whatever its
objective says. Optuna's pruners compare a metric across trials; none of them knows that a
run whose loss left the finite numbers, whose fp16 loss scale collapsed, or that fell back to
another precision is no longer measuring what the sweep asked (and the ranks already say so:
`skipped_steps`, `loss_scale` and the fallback events, see workers/training/)."""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import Job, JobEvent, Metric
from ampfleet.core.sweep_spec import Numerics

FALLBACK_REASONS = ("precision_fallback", "allreduce_fallback")
WATCHED = ("loss", "loss_scale", "skipped_steps")
EARLY_LOSSES = 5
"""Divergence is measured against the lowest of the first few logged losses, not the first
alone: a run that blows up in its first steps logs an inflated first value (thousands at a
learning rate of 1), and against it the divergence would go unseen for hundreds of steps."""


def numerics_problem(session: Session, job: Job, policy: Numerics) -> str | None:
    """Why the trial's numbers disqualify it, or None. Its failure too: a run that failed on
    non-finite gradients failed for its numerics, not for the platform."""
    if not policy.enabled:
        return None
    if job.failure_reason and "non-finite" in job.failure_reason:
        return f"numerics: {job.failure_reason}"
    if policy.prune_on_fallback:
        fallback = session.scalars(
            select(JobEvent)
            .where(JobEvent.job_id == job.id, JobEvent.reason.in_(FALLBACK_REASONS))
            .order_by(JobEvent.id)
            .limit(1)
        ).first()
        if fallback is not None:
            return f"numerics: {fallback.reason.replace('_', ' ')}: {fallback.message}"
    return _series_problem(session, job, policy)


def _series_problem(session: Session, job: Job, policy: Numerics) -> str | None:
    """What the watched metrics say: non-finite steps, divergence, a collapsed scale."""
    series: dict[str, list[tuple[int, float]]] = {name: [] for name in WATCHED}
    rows = session.execute(
        select(Metric.name, Metric.step, Metric.value)
        .where(Metric.job_id == job.id, Metric.name.in_(WATCHED))
        .order_by(Metric.id)
    )
    for name, step, value in rows:
        series[name].append((step, value))
    effective = job.precision or job.resolved.get("precision")
    skipped = [(step, v) for step, v in series["skipped_steps"] if v > 0]
    if skipped and effective != "fp16":  # fp16's scaler skips a few steps by design
        step, count = skipped[0]
        return f"numerics: loss went non-finite ({count:.0f} steps skipped by step {step})"
    losses = series["loss"]
    for index, (step, value) in enumerate(losses[1:], start=1):
        # The lowest loss before this point among the early ones: a run's later losses are
        # lower still, so a fast learner is never measured against its own progress.
        reference = min(v for _, v in losses[: min(index, EARLY_LOSSES)])
        if not math.isfinite(value) or (
            reference > 0 and value > policy.divergence_factor * reference
        ):
            return (
                f"numerics: diverged: loss {value:.4g} at step {step}, over "
                f"{policy.divergence_factor:g}x {reference:.4g}, the lowest of its first "
                f"{EARLY_LOSSES} logged"
            )
    for step, scale in series["loss_scale"]:
        if scale < policy.min_loss_scale:
            return (
                f"numerics: fp16 loss scale collapsed to {scale:.3g} at step {step} (below "
                f"{policy.min_loss_scale:g})"
            )
    return None
