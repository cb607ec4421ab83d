"""The node wakes the sweep controller when a trial's pruning metric is stored, and a rank
that reports that metric at every step cannot make it wake the scheduler without pause."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from ampfleet.core.models import Job
from ampfleet.workers import pruning_wake

SWEEP = "swp_hostile"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The module's clock, moved by the test; the sweep's pruning metric, as if read."""
    now = [1000.0]
    monkeypatch.setattr(pruning_wake, "monotonic", lambda: now[0])
    monkeypatch.setitem(pruning_wake._pruning_metrics, SWEEP, "val_accuracy")
    monkeypatch.setattr(pruning_wake, "_last_wake", {})
    return now


def trial(job_id: str) -> Job:
    return Job(id=job_id, sweep_id=SWEEP)


def test_only_the_pruning_metric_wakes_the_scheduler(clock: list[float]) -> None:
    session = Session()
    assert not pruning_wake.wake_on_pruning_point(session, trial("job_a"), {"loss"})
    assert not pruning_wake.wake_on_pruning_point(session, Job(id="job_b"), {"val_accuracy"})
    assert pruning_wake.wake_on_pruning_point(session, trial("job_a"), {"loss", "val_accuracy"})


def test_a_trial_reporting_its_pruning_metric_at_every_sync_wakes_it_once_a_gap(
    clock: list[float],
) -> None:
    session = Session()
    woke = []
    for _ in range(40):  # 20 s of the node's 0.5 s syncs, each storing the metric
        woke.append(pruning_wake.wake_on_pruning_point(session, trial("job_a"), {"val_accuracy"}))
        clock[0] += 0.5
    assert sum(woke) == 20 / pruning_wake.MIN_WAKE_GAP_S
    # Another trial's point is not held back by this one's.
    assert pruning_wake.wake_on_pruning_point(session, trial("job_a"), {"val_accuracy"})
    assert not pruning_wake.wake_on_pruning_point(session, trial("job_a"), {"val_accuracy"})
    assert pruning_wake.wake_on_pruning_point(session, trial("job_b"), {"val_accuracy"})
