"""What a Slurm job's state means for the ampfleet attempt it runs.

Slurm ends a job in one of a handful of states; ampfleet decides what comes next with its own
retry policy (Slurm's requeue is turned off at submit, so a restart is never made twice). The
mapping follows submitit's reading of them (`submitit/slurm/slurm.py`): node failures and
preemption are the cluster's doing and retried; a time limit is a limit; a cancel nobody in
ampfleet asked for is an operator's, retried like a lost node (restarts are bounded); the
others are the attempt's own failure. Out of memory is not retried: the restart would ask
Slurm for the same memory and run the same steps, and run out again, spending the job's
restarts on nothing (raise the memory, or lower the batch, and submit again).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Next(StrEnum):
    WAIT = "wait"
    """Still pending or running: nothing to do."""
    ENDED = "ended"
    """It ran to its end; the attempt reported its own end state (or is about to)."""
    RETRY = "retry"
    """Lost to the cluster or to the attempt's failure: a restart per the job's retry policy."""
    TIMED_OUT = "timed_out"
    FAILED = "failed"
    """The attempt's own failure that a restart would repeat: FAILED, not retried."""
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Meaning:
    next: Next
    reason: str
    """The event reason ampfleet records, stable for clients."""
    message: str


ACTIVE = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)

_ENDED: dict[str, tuple[Next, str, str]] = {
    "COMPLETED": (Next.ENDED, "slurm_completed", "the Slurm job completed"),
    "FAILED": (Next.RETRY, "slurm_failed", "the Slurm job failed"),
    "CANCELLED": (Next.CANCELLED, "slurm_cancelled", "the Slurm job was cancelled"),
    "TIMEOUT": (Next.TIMED_OUT, "slurm_timeout", "the Slurm job reached its time limit"),
    "DEADLINE": (Next.TIMED_OUT, "slurm_deadline", "the Slurm job reached its deadline"),
    "NODE_FAIL": (Next.RETRY, "slurm_node_fail", "a node of the Slurm job failed"),
    "BOOT_FAIL": (Next.RETRY, "slurm_boot_fail", "a node of the Slurm job failed to boot"),
    "PREEMPTED": (Next.RETRY, "slurm_preempted", "Slurm preempted the job"),
    "OUT_OF_MEMORY": (
        Next.FAILED,
        "slurm_out_of_memory",
        "the Slurm job ran out of memory (not retried: a restart would too)",
    ),
}


def meaning(state: str, job_id: int, reason: str = "") -> Meaning:
    """What `state` (a Slurm base state) of Slurm job `job_id` means for its attempt."""
    state = state.upper()
    if state in ACTIVE:
        return Meaning(Next.WAIT, "slurm_" + state.lower(), f"Slurm job {job_id} is {state}")
    found = _ENDED.get(state)
    if found is None:
        return Meaning(
            Next.RETRY, "slurm_unknown_state", f"Slurm job {job_id} ended in state {state}"
        )
    next_, code, text = found
    why = f" ({reason})" if reason and reason != "None" else ""
    return Meaning(next_, code, f"{text}: Slurm job {job_id}, state {state}{why}")
