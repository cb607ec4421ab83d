"""A sweep's events, the one recorder: a trial started, was pruned or ended; the sweep ended.
Each is a `sweep_events` row (what `GET /v1/sweeps/{id}/events` lists and streams) and a
webhook delivery to each of the project's webhooks that asked for its type, both in the
transaction of the change they report (the controller's pass, a cancel). Flushes, never
commits."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from ampfleet.core import webhooks
from ampfleet.core.models import Sweep, SweepEvent, SweepTrial
from ampfleet.core.sweep_spec import SweepState, TrialState


class SweepEventType(StrEnum):
    TRIAL_STARTED = "sweep.trial_started"
    TRIAL_COMPLETED = "sweep.trial_completed"
    TRIAL_PRUNED = "sweep.trial_pruned"
    TRIAL_FAILED = "sweep.trial_failed"
    TRIAL_CANCELLED = "sweep.trial_cancelled"
    SUCCEEDED = "sweep.succeeded"
    FAILED = "sweep.failed"
    CANCELLED = "sweep.cancelled"


TRIAL_ENDED = {
    TrialState.COMPLETE: SweepEventType.TRIAL_COMPLETED,
    TrialState.PRUNED: SweepEventType.TRIAL_PRUNED,
    TrialState.FAILED: SweepEventType.TRIAL_FAILED,
    TrialState.CANCELLED: SweepEventType.TRIAL_CANCELLED,
}
SWEEP_ENDED = {
    SweepState.SUCCEEDED: SweepEventType.SUCCEEDED,
    SweepState.FAILED: SweepEventType.FAILED,
    SweepState.CANCELLED: SweepEventType.CANCELLED,
}


def describe_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={_short(value)}" for name, value in params.items())


def trial_started(session: Session, sweep: Sweep, trial: SweepTrial, at: datetime) -> None:
    message = f"trial {trial.number}: {describe_params(trial.params)}"
    _record(session, sweep, SweepEventType.TRIAL_STARTED, message, at, trial)


def trial_ended(session: Session, sweep: Sweep, trial: SweepTrial, at: datetime) -> None:
    """The event of the state the trial has just taken (not running)."""
    kind = TRIAL_ENDED[TrialState(trial.state)]
    if trial.state == TrialState.COMPLETE:
        message = f"trial {trial.number} complete: {', '.join(map(_short, trial.values or []))}"
    else:
        message = f"trial {trial.number} {trial.state}: {trial.reason or 'no reason'}"
    _record(session, sweep, kind, message, at, trial)


def sweep_ended(session: Session, sweep: Sweep, counts: dict[str, int], at: datetime) -> None:
    """The event of the end the sweep has just reached; `counts`: its trials by state."""
    message = f"sweep {sweep.state}: {sweep.reason or ''}".rstrip(": ")
    details = {"state": sweep.state, "reason": sweep.reason, "counts": counts}
    _record(session, sweep, SWEEP_ENDED[SweepState(sweep.state)], message, at, None, details)


def _record(
    session: Session,
    sweep: Sweep,
    kind: SweepEventType,
    message: str,
    at: datetime,
    trial: SweepTrial | None,
    details: dict[str, Any] | None = None,
) -> None:
    if trial is not None:
        details = {
            "state": trial.state,
            "params": trial.params,
            "values": trial.values,
            "reason": trial.reason,
        }
    event = SweepEvent(
        sweep_id=sweep.id,
        time=at,
        type=kind.value,
        trial=trial.number if trial is not None else None,
        job_id=trial.job_id if trial is not None else None,
        message=message,
        details=details or {},
    )
    session.add(event)
    session.flush()  # its id: the stream's cursor and the delivery's key
    subscribed = webhooks.subscribers(session, [sweep.project]).get(sweep.project, [])
    webhooks.sweep_event(session, subscribed, project=sweep.project, event=event)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
