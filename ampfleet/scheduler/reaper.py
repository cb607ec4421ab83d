"""Attempts that can no longer finish: their node stopped heartbeating, or no node ever
started them. Each is requeued (or failed, past its restarts) through the lifecycle."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.lifecycle import requeue_or_fail
from ampfleet.core.models import Allocation, Job, Node
from ampfleet.core.settings import Settings
from ampfleet.core.states import JobState


def reap(session: Session, settings: Settings, now: datetime) -> int:
    reaped = 0
    cutoff = now - timedelta(seconds=settings.node_timeout_s)
    lost = session.execute(
        select(Allocation.job_id, Allocation.attempt, Node.id)
        .join(Node, Node.id == Allocation.node_id)
        .where(Allocation.released_at.is_(None), Node.last_heartbeat_at < cutoff)
    ).all()
    for job_id, attempt, node_id in sorted(set(lost)):
        if requeue_or_fail(
            session,
            job_id,
            attempt,
            reason="node_lost",
            message=f"node {node_id} stopped heartbeating "
            f"(none for {settings.node_timeout_s:.0f}s)",
        ):
            reaped += 1
    start_cutoff = now - timedelta(seconds=settings.start_timeout_s)
    stale = session.execute(
        select(Job.id, Job.attempt).where(
            Job.state == JobState.SCHEDULED, Job.scheduled_at < start_cutoff
        )
    ).all()
    for job_id, attempt in stale:
        if requeue_or_fail(
            session,
            job_id,
            attempt,
            reason="start_timeout",
            message=f"no node started it within {settings.start_timeout_s:.0f}s",
        ):
            reaped += 1
    return reaped
