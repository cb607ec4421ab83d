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
# Not placed anywhere and holding nothing: a cancel ends them at once.
WAITING_STATES = frozenset({JobState.QUEUED, JobState.RESTARTING})
# Placed and meant to go on: what a preemption, a drain or a lost attempt takes a job out of.
ACTIVE_STATES = frozenset({JobState.SCHEDULED, JobState.STARTING, JobState.RUNNING})
# A node has launched (or is launching) the attempt's ranks.
LAUNCHED_STATES = frozenset({JobState.STARTING, JobState.RUNNING})
# Placed, and the ranks (if any were launched) are asked to stop.
STOPPING_STATES = frozenset({JobState.CANCELLING, JobState.PREEMPTED})
# States in which a job's current attempt holds node slots. The ledger of slots is the
# allocation rows, not the state: a node's allocation is released only once its ranks have
# exited, which may be after the job's state has moved on (core/allocations.py).
SLOT_HOLDING_STATES = ACTIVE_STATES | STOPPING_STATES

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
    # PREEMPTED: asked to checkpoint and exit. A cancel meanwhile goes through CANCELLING
    # like any placed job's: CANCELLED means every rank has stopped.
    _S.PREEMPTED: frozenset({_S.QUEUED, _S.CANCELLING, _S.FAILED, _S.SUCCEEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.TIMED_OUT: frozenset(),
}
