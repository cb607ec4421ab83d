"""Job lifecycle: the states and which transitions are allowed."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    RESTARTING = "RESTARTING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT}
)
# States in which a job holds node slots (an active allocation).
PLACED_STATES = frozenset(
    {
        JobState.SCHEDULED,
        JobState.STARTING,
        JobState.RUNNING,
        JobState.CANCELLING,
        JobState.PREEMPTED,
    }
)

_S = JobState
ALLOWED_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.QUEUED: frozenset({_S.SCHEDULED, _S.CANCELLED, _S.FAILED}),
    _S.SCHEDULED: frozenset({_S.STARTING, _S.CANCELLING, _S.RESTARTING, _S.PREEMPTED, _S.FAILED}),
    _S.STARTING: frozenset(
        {
            _S.RUNNING,
            _S.SUCCEEDED,
            _S.FAILED,
            _S.CANCELLING,
            _S.RESTARTING,
            _S.PREEMPTED,
            _S.TIMED_OUT,
        }
    ),
    _S.RUNNING: frozenset(
        {_S.SUCCEEDED, _S.FAILED, _S.CANCELLING, _S.RESTARTING, _S.PREEMPTED, _S.TIMED_OUT}
    ),
    _S.CANCELLING: frozenset({_S.CANCELLED, _S.SUCCEEDED, _S.FAILED, _S.TIMED_OUT}),
    _S.RESTARTING: frozenset({_S.QUEUED, _S.FAILED, _S.CANCELLED}),
    # PREEMPTED: asked to checkpoint and exit; it keeps its slots until its ranks are gone.
    _S.PREEMPTED: frozenset({_S.QUEUED, _S.CANCELLED, _S.FAILED, _S.SUCCEEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.TIMED_OUT: frozenset(),
}


def sources_of(target: JobState) -> frozenset[JobState]:
    """Every state from which `target` may be entered."""
    return frozenset(src for src, targets in ALLOWED_TRANSITIONS.items() if target in targets)
