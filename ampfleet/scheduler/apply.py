"""Write one pass's decisions in bulk, inside the pass's transaction.

Placements go in as one fenced UPDATE (only jobs still QUEUED at their read attempt move),
then the events, allocations and start messages (outbox) of the jobs that did move, each
as one multi-row INSERT: a few statements per pass, not per job. A job placed on a compute
backend's pool gets one start message for its whole gang (core/backends.py).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, insert, tuple_, update
from sqlalchemy.orm import Session

from ampfleet.core import counters, tracing
from ampfleet.core.backends import BACKEND_START, is_backend_queue
from ampfleet.core.celery_config import START_ATTEMPT
from ampfleet.core.lifecycle import Transition, record_transitions, transition
from ampfleet.core.models import Allocation, Job, OutboxMessage
from ampfleet.core.states import ACTIVE_STATES, JobState
from ampfleet.scheduler.placement import Decision, Placement, Preemption
from ampfleet.scheduler.snapshot import Snapshot

log = logging.getLogger(__name__)


def apply(session: Session, snapshot: Snapshot, decision: Decision) -> int:
    placed = _place(session, snapshot, decision.placements)
    _preempt(session, decision.preemptions)
    _explain(session, snapshot, decision)
    return placed


CHUNK = 2000  # keeps each statement's parameter count well inside SQLite's limit


def _place(session: Session, snapshot: Snapshot, placements: list[Placement]) -> int:
    return sum(
        _place_chunk(session, snapshot, placements[i : i + CHUNK])
        for i in range(0, len(placements), CHUNK)
    )


def _place_chunk(session: Session, snapshot: Snapshot, placements: list[Placement]) -> int:
    if not placements:
        return 0
    now = snapshot.now
    wanted = {p.job_id: p for p in placements}
    keys = [(job_id, snapshot.queued[job_id].attempt) for job_id in wanted]
    moved = session.execute(
        update(Job)
        .where(tuple_(Job.id, Job.attempt).in_(keys), Job.state == JobState.QUEUED)
        .values(
            state=JobState.SCHEDULED.value,
            attempt=Job.attempt + 1,
            scheduled_at=now,
            updated_at=now,
            pending_reason=None,
            queue_position=None,
            estimated_start_at=None,
        )
        .returning(Job.id, Job.attempt, Job.created_at, Job.project, Job.trace_context)
        .execution_options(synchronize_session=False)
    ).all()
    if not moved:
        return 0
    counters.observe(
        session,
        counters.SCHEDULING_LATENCY,
        counters.SCHEDULING_LATENCY_BUCKETS,
        ((now - created).total_seconds() for _, attempt, created, _, _ in moved if attempt == 1),
    )
    placed: list[Transition] = []
    allocations: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for job_id, attempt, _, project, trace_context in moved:
        placement = wanted[job_id]
        where = ", ".join(f"{node} x{slots}" for node, slots in placement.allocations)
        if placement.topology is not None:
            where += f" {placement.topology}"
        handed_on = placement_traced(job_id, attempt, where, trace_context, snapshot)
        if placement.shape is not None:
            ranks = sum(slots for _, slots in placement.allocations)
            where += (
                f": {ranks} of its {placement.shape} ranks, which resources.procs_min allows "
                "when its shape is not free; it resumes from its checkpoint resharded onto them"
            )
        placed.append(
            Transition(
                job_id=job_id,
                project=project,
                attempt=attempt,
                from_state=JobState.QUEUED,
                to_state=JobState.SCHEDULED,
                reason="placed",
                message=f"attempt {attempt} on {where}",
            )
        )
        for node_rank, (node_id, slots) in enumerate(placement.allocations):
            allocations.append(
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "node_id": node_id,
                    "node_rank": node_rank,
                    "slots": slots,
                    "created_at": now,
                }
            )
            queue = snapshot.node_queues[node_id]
            if is_backend_queue(queue):
                # One start for the whole gang: the backend launches every node of it.
                if node_rank == 0:
                    messages.append(_backend_start(queue, job_id, attempt, handed_on, now))
                continue
            messages.append(
                {
                    "queue": queue,
                    "task": START_ATTEMPT,
                    "kwargs": {
                        "job_id": job_id,
                        "attempt": attempt,
                        "node_rank": node_rank,
                        "trace_context": handed_on,
                    },
                    "created_at": now,
                    "send_attempts": 0,
                }
            )
    record_transitions(session, placed, at=now)
    session.execute(insert(Allocation), allocations)
    session.execute(insert(OutboxMessage), messages)
    return len(moved)


def _backend_start(
    queue: str, job_id: str, attempt: int, trace_context: dict[str, str] | None, now: datetime
) -> dict[str, Any]:
    """The one message that starts an attempt placed on a compute backend's pool."""
    return {
        "queue": queue,
        "task": BACKEND_START,
        "kwargs": {"job_id": job_id, "attempt": attempt, "trace_context": trace_context},
        "created_at": now,
        "send_attempts": 0,
    }


def placement_traced(
    job_id: str,
    attempt: int,
    where: str,
    trace_context: dict[str, str] | None,
    snapshot: Snapshot,
) -> dict[str, str] | None:
    """The placement as a span of the job's trace, from the start of the pass that made
    it; its context, which the start messages hand on to the nodes."""
    attributes: dict[str, str | int] = {
        "ampfleet.job_id": job_id,
        "ampfleet.attempt": attempt,
        "ampfleet.nodes": where,
    }
    with tracing.continued("ampfleet.place", trace_context, attributes, start=snapshot.now):
        log.info("placed %s attempt %d on %s", job_id, attempt, where)
        return tracing.current_context()


def _preempt(session: Session, preemptions: list[Preemption]) -> None:
    for preemption in preemptions:
        transition(
            session,
            preemption.victim_id,
            JobState.PREEMPTED,
            from_states=ACTIVE_STATES,
            reason="preempted",
            message=f"making room for higher-priority job {preemption.for_job_id}; "
            "it checkpoints and goes back to the queue",
        )


def _explain(session: Session, snapshot: Snapshot, decision: Decision) -> None:
    """Store why each job waits; only rows whose explanation changed are written."""
    changes = []
    position_offset = len(decision.pending)
    for job_id, until in snapshot.backing_off.items():
        position_offset += 1
        reason = f"restart backoff until {until.astimezone(UTC):%H:%M:%S} UTC"
        changes.append(_change(snapshot, job_id, (position_offset, reason, until)))
    for job_id, pending in decision.pending.items():
        start = (
            datetime.fromtimestamp(pending.estimated_start, UTC)
            if pending.estimated_start is not None
            else None
        )
        changes.append(_change(snapshot, job_id, (pending.position, pending.reason, start)))
    rows = [c for c in changes if c is not None]
    if rows:
        # A Core UPDATE, executed once per row by the driver (executemany): the ORM would
        # treat a bulk UPDATE on the mapped class as "by primary key" and want `id` keys.
        jobs = cast(Table, Job.__table__)
        session.connection().execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), jobs.c.state == JobState.QUEUED.value)
            .values(
                queue_position=bindparam("b_position"),
                pending_reason=bindparam("b_reason"),
                estimated_start_at=bindparam("b_start"),
            ),
            rows,
        )


def _change(
    snapshot: Snapshot, job_id: str, explanation: tuple[int | None, str | None, datetime | None]
) -> dict[str, Any] | None:
    previous = snapshot.queued[job_id].pending
    if _same(previous, explanation):
        return None
    position, reason, start = explanation
    return {"b_id": job_id, "b_position": position, "b_reason": reason, "b_start": start}


def _same(
    a: tuple[int | None, str | None, datetime | None],
    b: tuple[int | None, str | None, datetime | None],
) -> bool:
    if a[0] != b[0] or a[1] != b[1]:
        return False
    if a[2] is None or b[2] is None:
        return a[2] is b[2]
    return abs((a[2] - b[2]).total_seconds()) < 30  # estimates drift; do not churn rows
