"""Read what one scheduling pass needs from the database into placement's pure inputs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.fairshare import ProjectPolicy, project_policies
from ampfleet.core.fleet import JobRequest, NodeView, job_request_of, node_view
from ampfleet.core.models import Allocation, Job, Node
from ampfleet.core.settings import Settings
from ampfleet.core.states import SLOT_HOLDING_STATES, JobState
from ampfleet.core.usage import usage_by_project
from ampfleet.scheduler.placement import Decision, schedule
from ampfleet.scheduler.preemption import RunningJob

MAX_QUEUED_PER_PASS = 20_000


@dataclass
class QueuedRow:
    """What the pass needs of a queued job, and what it last told the job (so unchanged
    explanations are not rewritten)."""

    id: str
    attempt: int
    queue: str | None
    not_before: datetime | None
    pending: tuple[int | None, str | None, datetime | None]


@dataclass
class Snapshot:
    now: datetime
    requests: list[JobRequest]
    backing_off: dict[str, datetime]
    queued: dict[str, QueuedRow]
    nodes: list[NodeView]
    node_queues: dict[str, str]
    running: list[RunningJob]
    usage: dict[str, float]
    policies: dict[str, ProjectPolicy]

    def decide(self) -> Decision:
        """The pass's decision on this world: what to place, what waits and why."""
        return schedule(
            self.requests,
            self.nodes,
            self.running,
            self.usage,
            self.policies,
            self.now.timestamp(),
        )


def load(session: Session, settings: Settings, now: datetime) -> Snapshot:
    jobs = session.execute(
        select(
            Job.id,
            Job.project,
            Job.priority,
            Job.attempt,
            Job.resolved,
            Job.not_before,
            Job.queue_position,
            Job.pending_reason,
            Job.estimated_start_at,
        )
        .where(Job.state == JobState.QUEUED)
        .order_by(Job.priority.desc(), Job.id)
        .limit(MAX_QUEUED_PER_PASS)
    ).all()
    requests, backing_off, queued = [], {}, {}
    for row in jobs:
        queued[row.id] = QueuedRow(
            row.id,
            row.attempt,
            None,
            row.not_before,
            (row.queue_position, row.pending_reason, row.estimated_start_at),
        )
        if row.not_before is not None and row.not_before > now:
            backing_off[row.id] = row.not_before
            continue
        requests.append(
            job_request_of(
                row.resolved, job_id=row.id, priority=row.priority, restart=row.attempt > 0
            )
        )

    used = used_slots_by_node(session)
    node_rows = list(session.scalars(select(Node)))
    nodes = [
        node_view(n, used.get(n.id, 0), now=now, timeout_s=settings.node_timeout_s)
        for n in node_rows
    ]
    return Snapshot(
        now=now,
        requests=requests,
        backing_off=backing_off,
        queued=queued,
        nodes=nodes,
        node_queues={n.id: n.queue for n in node_rows},
        running=_running(session, now),
        usage=usage_by_project(session, settings.fair_share_window_s),
        policies=project_policies(session),
    )


def _running(session: Session, now: datetime) -> list[RunningJob]:
    rows = session.execute(
        select(
            Job.id,
            Job.project,
            Job.priority,
            Job.state,
            Job.step,
            Job.total_steps,
            Job.started_at,
            Job.scheduled_at,
            Allocation.node_id,
            Allocation.slots,
        )
        .join(Allocation, (Allocation.job_id == Job.id) & (Allocation.attempt == Job.attempt))
        .where(
            Allocation.released_at.is_(None), Job.state.in_([s.value for s in SLOT_HOLDING_STATES])
        )
    ).all()
    grouped: dict[str, dict[str, int]] = {}
    info = {}
    for row in rows:
        grouped.setdefault(row.id, {})[row.node_id] = row.slots
        info[row.id] = row
    running = []
    for job_id, allocations in grouped.items():
        row = info[job_id]
        started = row.started_at or row.scheduled_at or now
        running.append(
            RunningJob(
                id=job_id,
                project=row.project,
                priority=row.priority,
                allocations=allocations,
                estimated_end=_estimated_end(row.step, row.total_steps, row.started_at, now),
                started=started.timestamp(),
                # Already told to checkpoint and exit: its slots come back soon, and it must
                # never be chosen as a victim again.
                preempting=row.state == JobState.PREEMPTED,
            )
        )
    return running


def _estimated_end(
    step: int, total: int | None, started: datetime | None, now: datetime
) -> float | None:
    if not total or not started or step <= 0:
        return None
    elapsed = (now - started).total_seconds()
    return now.timestamp() + elapsed / step * max(total - step, 0)
