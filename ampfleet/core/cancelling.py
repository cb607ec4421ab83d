"""Cancelling a job, the one way every caller does it (a user's request, a project's idle
policy): not yet placed, it is CANCELLED at once; placed (or preempted, its ranks perhaps
still checkpointing), it is CANCELLING, and its node stops every rank and ends it CANCELLED
once they have exited (holding its slots until then). Flushes, never commits."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ampfleet.core.lifecycle import transition
from ampfleet.core.states import ACTIVE_STATES, WAITING_STATES, JobState

CANCEL_ROUTES = (
    (JobState.CANCELLED, WAITING_STATES),
    (JobState.CANCELLING, ACTIVE_STATES | {JobState.PREEMPTED}),
)


def request_cancel(
    session: Session, job_id: str, *, reason: str, message: str, attempt: int | None = None
) -> JobState | None:
    """The state the job moved to, or None where it was in none a cancel moves (ended,
    CANCELLING already, or at another attempt than `attempt`)."""
    for target, sources in CANCEL_ROUTES:
        if transition(
            session,
            job_id,
            target,
            from_states=sources,
            reason=reason,
            message=message,
            attempt=attempt,
        ):
            return target
    return None
