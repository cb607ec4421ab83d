"""GPU-seconds used per project in a sliding window: the fair-share currency."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ampfleet.core.models import Allocation, Job, utcnow


def usage_by_project(session: Session, window_s: float) -> dict[str, float]:
    """Slot-seconds of allocations overlapping the last `window_s` seconds, by project."""
    now = utcnow()
    start = now - timedelta(seconds=window_s)
    rows = session.execute(
        select(Job.project, Allocation.slots, Allocation.created_at, Allocation.released_at)
        .join(Job, Job.id == Allocation.job_id)
        .where(or_(Allocation.released_at.is_(None), Allocation.released_at > start))
    )
    usage: dict[str, float] = {}
    for project, slots, created, released in rows:
        begin, end = max(created, start), released or now
        if end > begin:
            usage[project] = usage.get(project, 0.0) + slots * (end - begin).total_seconds()
    return usage
