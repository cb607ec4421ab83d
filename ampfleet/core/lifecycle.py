"""State transitions as fenced, conditional UPDATEs, each recorded as an event row.

Every process changes job state only through `transition`: the UPDATE names the states it
may leave (and, where given, the attempt it is about), so a stale or duplicate actor changes
nothing and learns so from the return value. Terminal states never change.

What a change leaves behind (its event row and its webhook notifications) is written by
`record_transitions` alone, for one change or a whole pass's: the submit that creates a job
in QUEUED and the scheduler's bulk placement UPDATE use it as `transition` does. So it is
also where the fleet counts submitted and finished jobs (core/counters.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from ampfleet.core import counters, profiles, webhooks
from ampfleet.core.models import Allocation, Job, JobEvent, utcnow
from ampfleet.core.states import ACTIVE_STATES, ALLOWED_TRANSITIONS, SLOT_HOLDING_STATES, JobState


class IllegalTransitionError(ValueError):
    pass


class JobVanishedError(LookupError):
    """A job row that this transaction just changed is gone (deleted under it)."""


@dataclass(frozen=True)
class Transition:
    """A state change already made in this transaction, as its event row tells it."""

    job_id: str
    project: str
    attempt: int
    from_state: JobState | None  # None: the job was just submitted
    to_state: JobState
    reason: str
    message: str = ""


def record_transitions(session: Session, changes: Sequence[Transition], *, at: datetime) -> None:
    """The bookkeeping of state changes already made: one event row each (a single
    multi-row INSERT), a notification to every webhook of the job's project that asked
    for the new state (one query for all the projects, none for those known to have none),
    and the fleet's counters of submitted and finished jobs: kept apart from the job rows,
    they never go down when jobs are deleted."""
    if not changes:
        return
    submitted = sum(1 for change in changes if change.from_state is None)
    counters.add_at_commit(session, counters.JOBS_SUBMITTED, {"": float(submitted)})
    # Terminal states never change, so a job reaches one in exactly one change.
    finished = Counter(change.to_state.value for change in changes if change.to_state.is_terminal())
    counters.add_at_commit(
        session, counters.JOBS_FINISHED, {s: float(n) for s, n in finished.items()}
    )
    session.execute(
        insert(JobEvent),
        [
            {
                "job_id": change.job_id,
                "attempt": change.attempt,
                "time": at,
                "kind": "transition",
                "from_state": change.from_state.value if change.from_state else None,
                "to_state": change.to_state.value,
                "reason": change.reason,
                "message": change.message,
            }
            for change in changes
        ],
    )
    subscribers = webhooks.subscribers(session, {change.project for change in changes})
    for change in changes:
        webhooks.state_changed(
            session,
            subscribers.get(change.project, []),
            project=change.project,
            job_id=change.job_id,
            attempt=change.attempt,
            from_state=change.from_state.value if change.from_state else None,
            to_state=change.to_state.value,
            reason=change.reason,
            message=change.message,
        )


def transition(
    session: Session,
    job_id: str,
    to: JobState,
    *,
    from_states: Iterable[JobState],
    reason: str,
    message: str = "",
    attempt: int | None = None,
    new_attempt: int | None = None,
    **fields: Any,
) -> bool:
    """Move `job_id` to `to` if it is in one of `from_states` (and at `attempt`, if given).

    Returns whether this call made the change. `new_attempt` renumbers the attempt (when a
    job is placed); other keyword arguments are column values written in the same UPDATE.
    """
    sources = frozenset(from_states)
    for source in sources:
        if to not in ALLOWED_TRANSITIONS[source]:
            raise IllegalTransitionError(f"{source} -> {to} is not a job transition")
    now = utcnow()
    values: dict[str, Any] = {"state": to.value, "updated_at": now, **fields}
    if new_attempt is not None:
        values["attempt"] = new_attempt
    if to.is_terminal():
        values.setdefault("finished_at", now)
    # Compare-and-set on the state we read, so the event names the exact prior state; a
    # concurrent change makes the UPDATE match nothing and we look again.
    for _ in range(5):
        row = session.execute(
            select(Job.state, Job.attempt, Job.project).where(Job.id == job_id)
        ).one_or_none()
        if row is None or JobState(row.state) not in sources:
            return False
        if attempt is not None and row.attempt != attempt:
            return False
        result = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.state == row.state, Job.attempt == row.attempt)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            break
    else:
        return False
    record_transitions(
        session,
        [
            Transition(
                job_id=job_id,
                project=row.project,
                attempt=row.attempt if new_attempt is None else new_attempt,
                from_state=JobState(row.state),
                to_state=to,
                reason=reason,
                message=message,
            )
        ],
        at=now,
    )
    if row.state == JobState.RUNNING:
        profiles.left_running(session, job_id, to)
    if to not in SLOT_HOLDING_STATES:
        _release_unclaimed(session, job_id)
    session.flush()
    return True


def _release_unclaimed(session: Session, job_id: str) -> None:
    """The attempt is over or requeued: free what no node has claimed, which also fences
    off a late start message. A claimed row is released by its node once its ranks have
    exited (core/allocations.py)."""
    session.execute(
        update(Allocation)
        .where(
            Allocation.job_id == job_id,
            Allocation.released_at.is_(None),
            Allocation.launched_at.is_(None),
        )
        .values(released_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def record_event(session: Session, job: Job, reason: str, message: str) -> None:
    """An event that is not a state change (fallbacks, warnings, limits hit)."""
    session.add(
        JobEvent(job_id=job.id, attempt=job.attempt, kind="info", reason=reason, message=message)
    )


def restart_backoff_s(attempt: int) -> float:
    """Seconds before a lost attempt's job may be placed again: 2, 4, 8 ... up to 60."""
    return float(min(2**attempt, 60))


def requeue_or_fail(
    session: Session, job_id: str, attempt: int, *, reason: str, message: str
) -> JobState | None:
    """An attempt was lost (node died, ranks killed): RESTARTING, then QUEUED again while
    restarts remain, else FAILED. A job being cancelled just ends CANCELLED.

    Returns the state the job ended in, or None when the attempt was already stale.
    """
    if transition(
        session,
        job_id,
        JobState.CANCELLED,
        from_states={JobState.CANCELLING},
        attempt=attempt,
        reason=reason,
        message=f"{message}; it was being cancelled",
    ):
        return JobState.CANCELLED
    if transition(
        session,
        job_id,
        JobState.QUEUED,
        from_states={JobState.PREEMPTED},
        attempt=attempt,
        reason=reason,
        message=f"{message} while being preempted; requeued",
    ):
        return JobState.QUEUED
    if not transition(
        session,
        job_id,
        JobState.RESTARTING,
        from_states=ACTIVE_STATES,
        attempt=attempt,
        reason=reason,
        message=message,
    ):
        return None
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise JobVanishedError(f"job {job_id} disappeared while being requeued")
    max_restarts = int(job.resolved["retry"]["max_restarts"])
    if attempt <= max_restarts:
        delay = restart_backoff_s(attempt)
        transition(
            session,
            job_id,
            JobState.QUEUED,
            from_states={JobState.RESTARTING},
            reason="requeued",
            message=f"restart {attempt} of {max_restarts} in {delay:.0f}s; resumes from its "
            "last checkpoint",
            not_before=utcnow() + timedelta(seconds=delay),
        )
        return JobState.QUEUED
    transition(
        session,
        job_id,
        JobState.FAILED,
        from_states={JobState.RESTARTING},
        reason="restarts_exhausted",
        message=f"{message}; no restarts left ({max_restarts} allowed)",
        failure_reason=f"{message} (gave up after {attempt} attempts)",
    )
    return JobState.FAILED
