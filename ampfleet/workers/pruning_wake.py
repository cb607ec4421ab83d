"""Waking the sweep controller as soon as a trial's pruning metric is stored.

The controller (scheduler/sweeps.py) decides a trial's rung in a scheduler pass, and a pass
runs when something wakes the scheduler, or else every `scheduler_poll_s`. A trial to be
pruned at a rung trained on, for nothing, until the next poll: with the default 2 s, a
tenth more than the steps of a trial stopped at its first rung. So the node agent wakes the
scheduler once it has stored a point the trial's pruner reads, and only then: a trial's
other metrics land at every flush, and a pass for each would only cost.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError
from sqlalchemy.orm import Session

from ampfleet.core.db import after_commit
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.models import Job, Sweep
from ampfleet.core.sweep_spec import PrunerKind, SweepSpec

MAX_REMEMBERED = 1024
"""Sweeps whose pruning metric a node agent remembers (a sweep's spec never changes)."""
_pruning_metrics: dict[str, str | None] = {}


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


def wake_on_pruning_point(session: Session, job: Job, names: Iterable[str]) -> None:
    """Wakes the scheduler once this transaction commits, where `names` (the metrics it
    stores for `job`) hold its sweep's pruning metric."""
    if job.sweep_id is None:
        return
    metric = pruning_metric(session, job.sweep_id)
    if metric is not None and metric in set(names):
        after_commit(session, wake_scheduler)
