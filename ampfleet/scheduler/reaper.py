"""Attempts that can no longer finish: their node stopped heartbeating, or a node never
claimed its share of them, for as long as core/fleet.py's `silent_before` says. Each is
requeued (or failed, past its restarts) through the lifecycle. And attempts that have
stopped: asked to stop, with no node holding a claimed share of them any more
(core/allocations.py), they end as whoever released the last share would have ended them.

A dead node's claimed allocations are not released here (core/allocations.py): nothing
proves its ranks have exited, and a dead node is not placed on anyway. Its next worker
releases them at start, or its supervisor once it sees the attempt is over.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.allocations import end_if_stopped, stopped_attempts
from ampfleet.core.backends import backend_queue_prefix
from ampfleet.core.fleet import silent_before
from ampfleet.core.lifecycle import requeue_or_fail
from ampfleet.core.models import Allocation, Job, Node
from ampfleet.core.settings import Settings
from ampfleet.core.states import SLOT_HOLDING_STATES

_CURRENT = (Allocation.job_id == Job.id) & (Allocation.attempt == Job.attempt)


def reap(
    session: Session, settings: Settings, now: datetime, watched_since: datetime | None = None
) -> int:
    """`watched_since`: when the scheduler last regained the database (None: it never lost
    it); silence from before then is not held against anyone."""
    reaped = 0
    cutoff = silent_before(now, settings.node_timeout_s, watched_since)
    lost = (
        session.execute(
            select(Allocation.job_id, Allocation.attempt, Node.id)
            .join(Node, Node.id == Allocation.node_id)
            .join(Job, _CURRENT)
            .where(
                Allocation.released_at.is_(None),
                Node.last_heartbeat_at < cutoff,
                Job.state.in_([s.value for s in SLOT_HOLDING_STATES]),
            )
        ).all()
        if cutoff is not None
        else []
    )
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
    # A start message lost, or never acted on: whatever state the job is in (SCHEDULED,
    # STARTING on its other nodes, or cancelled or preempted before it started).
    start_cutoff = silent_before(now, settings.start_timeout_s, watched_since)
    stale = (
        session.execute(
            select(Allocation.job_id, Allocation.attempt)
            .join(Job, _CURRENT)
            .join(Node, Node.id == Allocation.node_id)
            .where(
                Allocation.released_at.is_(None),
                Allocation.launched_at.is_(None),
                Allocation.created_at < start_cutoff,
                # A backend's job may wait in its cluster's queue: the backend watches it.
                ~Node.queue.startswith(backend_queue_prefix()),
                Job.state.in_([s.value for s in SLOT_HOLDING_STATES]),
            )
            .distinct()
        ).all()
        if start_cutoff is not None
        else []
    )
    for job_id, attempt in stale:
        if requeue_or_fail(
            session,
            job_id,
            attempt,
            reason="start_timeout",
            message=f"no node started it within {settings.start_timeout_s:.0f}s",
        ):
            reaped += 1
    for job_id, attempt in stopped_attempts(session):
        if end_if_stopped(session, job_id, attempt):
            reaped += 1
    return reaped
