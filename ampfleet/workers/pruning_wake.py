"""Waking the sweep controller as soon as a trial's pruning metric is stored.

The controller (scheduler/sweeps.py) decides a trial's rung in a scheduler pass, and a pass
runs when something wakes the scheduler, or else every `scheduler_poll_s`. A trial to be
pruned at a rung trained on, for nothing, until the next poll: with the default 2 s, a
tenth more than the steps of a trial stopped at its first rung. So the node agent wakes the
scheduler once it has stored a point the trial's pruner reads, and only then: a trial's
other metrics land at every flush, and a pass for each would only cost.

A rank chooses what it reports: one that reports its pruning metric at every step must not
make the scheduler pass without pause (each pass rebuilds every running sweep's study), so
a trial wakes it at most once per `MIN_WAKE_GAP_S`, no more often than a poll would.
"""

from __future__ import annotations

from collections.abc import Collection
from time import monotonic

from pydantic import ValidationError
from sqlalchemy.orm import Session

from ampfleet.core.db import after_commit
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.models import Job, Sweep
from ampfleet.core.sweep_spec import PrunerKind, SweepSpec

MAX_REMEMBERED = 1024
"""Sweeps (and trials) a node agent remembers: a sweep's pruning metric never changes."""
MIN_WAKE_GAP_S = 1.0
"""The least time between two wake-ups for one trial."""
_pruning_metrics: dict[str, str | None] = {}
_last_wake: dict[str, float] = {}


def pruning_metric(session: Session, sweep_id: str) -> str | None:
    """The metric the sweep's pruner reads; None where it has no pruner (or is gone)."""
    if sweep_id not in _pruning_metrics:
        sweep = session.get(Sweep, sweep_id)
        metric = None
        if sweep is not None:
            try:
                spec = SweepSpec.model_validate(sweep.spec)
            except ValidationError:  # the controller says so; the node only stores points
                spec = None
            if spec is not None and spec.pruner.type is not PrunerKind.NONE:
                metric = spec.pruner_metric
        if len(_pruning_metrics) >= MAX_REMEMBERED:
            _pruning_metrics.clear()
        _pruning_metrics[sweep_id] = metric
    return _pruning_metrics[sweep_id]


def wake_on_pruning_point(session: Session, job: Job, names: Collection[str]) -> bool:
    """Wakes the scheduler once this transaction commits, where `names` (the metrics it
    stores for `job`) hold its sweep's pruning metric and the trial's last wake-up is
    `MIN_WAKE_GAP_S` old; whether it did."""
    if job.sweep_id is None:
        return False
    metric = pruning_metric(session, job.sweep_id)
    if metric is None or metric not in names:
        return False
    now = monotonic()
    if now - _last_wake.get(job.id, now - MIN_WAKE_GAP_S) < MIN_WAKE_GAP_S:
        return False
    if len(_last_wake) >= MAX_REMEMBERED:
        _last_wake.clear()
    _last_wake[job.id] = now
    after_commit(session, wake_scheduler)
    return True
