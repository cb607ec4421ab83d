"""The precision and AllReduce fallbacks a job took, as the model's manifest lists them.

The ranks of an attempt see their own fallbacks and the earlier attempts' that ran on their
node (rank 0's records in the run folders); an earlier attempt on another node is known here
only through the job's events, which the agent hands to the attempt in its job file.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.models import JobEvent
from ampfleet.workers.rundir import FALLBACK_REASONS


def earlier_fallbacks(session: Session, job_id: str, attempt: int) -> list[dict[str, Any]]:
    """The job's fallback events from attempts before `attempt`, oldest first."""
    rows = session.execute(
        select(JobEvent.attempt, JobEvent.time, JobEvent.reason, JobEvent.message)
        .where(
            JobEvent.job_id == job_id,
            JobEvent.attempt < attempt,
            JobEvent.reason.in_(list(FALLBACK_REASONS)),
        )
        .order_by(JobEvent.id)
    )
    return [
        {"attempt": number, "time": time.timestamp(), "reason": reason, "message": message}
        for number, time, reason, message in rows
    ]
