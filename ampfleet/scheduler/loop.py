"""`ampfleet scheduler`: place queued jobs, reap lost attempts, relay the outbox.

A pass runs when something wakes the scheduler (a submit, a finished attempt: a message on
the `scheduler` queue) and at least every `scheduler_poll_s`. Each placement writes the
job's new state, its allocations and its start messages in one transaction; the messages
are sent only after that commits.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.message import Message
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.db import is_postgres, session_scope
from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.messaging import START_ATTEMPT, enqueue, get_celery, relay_outbox
from ampfleet.core.models import Allocation, Job, Node, utcnow
from ampfleet.core.settings import SCHEDULER_QUEUE, Settings, get_settings
from ampfleet.core.states import JobState
from ampfleet.scheduler.placement import NodeCapacity, PendingJob, Placement, place

log = logging.getLogger(__name__)
ADVISORY_LOCK_KEY = 0x616D70666C656574  # "ampfleet": one placing scheduler at a time
MAX_PENDING_PER_PASS = 5000


class Scheduler:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    # -- one pass -------------------------------------------------------------------------

    def run_pass(self) -> int:
        with session_scope() as session:
            if not self._take_lock(session):
                return 0
            self._reap(session)
            placed = self._schedule(session)
        with session_scope() as session:
            relay_outbox(session)
        return placed

    def _take_lock(self, session: Session) -> bool:
        if not is_postgres(session):
            return True  # SQLite: BEGIN IMMEDIATE already serialises writers
        return bool(
            session.scalar(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
        )

    def _live_nodes(self, session: Session) -> list[Node]:
        cutoff = utcnow() - timedelta(seconds=self.settings.node_timeout_s)
        return list(
            session.scalars(
                select(Node).where(Node.state == "ready", Node.last_heartbeat_at >= cutoff)
            )
        )

    def _schedule(self, session: Session) -> int:
        jobs = session.scalars(
            select(Job)
            .where(Job.state == JobState.QUEUED)
            .order_by(Job.priority.desc(), Job.id)
            .limit(MAX_PENDING_PER_PASS)
        ).all()
        if not jobs:
            return 0
        used = used_slots_by_node(session)
        nodes = {n.id: n for n in self._live_nodes(session)}
        capacity = [
            NodeCapacity(n.id, n.accelerator, n.gpu_model, n.slots - int(used.get(n.id, 0)))
            for n in nodes.values()
        ]
        by_id = {job.id: job for job in jobs}
        pending = [
            PendingJob(
                id=job.id,
                priority=job.priority,
                nodes=job.resolved["resources"]["nodes"],
                procs_per_node=job.resolved["resources"]["procs_per_node"],
                accelerator=job.resolved["resources"]["accelerator"],
                gpu_type=job.resolved["resources"].get("gpu_type"),
            )
            for job in jobs
        ]
        placements = place(pending, capacity)
        for placement in placements:
            self._commit_placement(session, by_id[placement.job_id], placement, nodes)
        return len(placements)

    def _commit_placement(
        self, session: Session, job: Job, placement: Placement, nodes: dict[str, Node]
    ) -> None:
        attempt = job.attempt + 1
        if not transition(
            session,
            job.id,
            JobState.SCHEDULED,
            from_states={JobState.QUEUED},
            attempt=job.attempt,
            new_attempt=attempt,
            reason="placed",
            message=f"attempt {attempt} on {', '.join(placement.node_ids)}",
            scheduled_at=utcnow(),
        ):
            return  # cancelled meanwhile
        for node_rank, node_id in enumerate(placement.node_ids):
            session.add(
                Allocation(
                    job_id=job.id,
                    attempt=attempt,
                    node_id=node_id,
                    node_rank=node_rank,
                    slots=placement.procs_per_node,
                )
            )
            enqueue(
                session,
                queue=nodes[node_id].queue,
                task=START_ATTEMPT,
                job_id=job.id,
                attempt=attempt,
                node_rank=node_rank,
            )
        session.flush()

    def _reap(self, session: Session) -> None:
        """Attempts whose node stopped heartbeating, or whose start never arrived."""
        cutoff = utcnow() - timedelta(seconds=self.settings.node_timeout_s)
        lost = session.execute(
            select(Allocation.job_id, Allocation.attempt, Node.id)
            .join(Node, Node.id == Allocation.node_id)
            .where(Allocation.released_at.is_(None), Node.last_heartbeat_at < cutoff)
        ).all()
        for job_id, attempt, node_id in {(j, a, n) for j, a, n in lost}:
            requeue_or_fail(
                session,
                job_id,
                attempt,
                reason="node_lost",
                message=f"node {node_id} stopped heartbeating",
            )
        start_cutoff = utcnow() - timedelta(seconds=self.settings.start_timeout_s)
        stale = session.execute(
            select(Job.id, Job.attempt).where(
                Job.state == JobState.SCHEDULED, Job.scheduled_at < start_cutoff
            )
        ).all()
        for job_id, attempt in stale:
            requeue_or_fail(
                session,
                job_id,
                attempt,
                reason="start_timeout",
                message=f"no node started it within {self.settings.start_timeout_s:.0f}s",
            )

    # -- the process ----------------------------------------------------------------------

    def run_forever(self) -> None:
        log.info("scheduler running (poll every %.1fs)", self.settings.scheduler_poll_s)
        queue = Queue(
            SCHEDULER_QUEUE, Exchange(SCHEDULER_QUEUE, type="direct"), routing_key=SCHEDULER_QUEUE
        )
        while not self._stop.is_set():
            try:
                with get_celery().connection_for_read() as connection:
                    self._serve(connection, queue)
            except Exception:
                log.warning("broker unavailable; polling the database only", exc_info=True)
                self._safe_pass()
                self._stop.wait(self.settings.scheduler_poll_s)

    def _serve(self, connection: Connection, queue: Queue) -> None:
        def on_wake(_body: object, message: Message) -> None:
            message.ack()

        with connection.Consumer([queue], callbacks=[on_wake], accept=["json"]):
            while not self._stop.is_set():
                self._safe_pass()
                try:
                    connection.drain_events(timeout=self.settings.scheduler_poll_s)
                except TimeoutError:  # socket.timeout is TimeoutError
                    continue
                _drain_without_waiting(connection)

    def _safe_pass(self) -> None:
        try:
            placed = self.run_pass()
            if placed:
                log.info("placed %d job(s)", placed)
        except Exception:
            log.exception("scheduling pass failed; retrying on the next pass")


def _drain_without_waiting(connection: Connection) -> None:
    """Many wake-ups that arrive together need only one pass."""
    for _ in range(1000):
        try:
            connection.drain_events(timeout=0.01)
        except TimeoutError:
            return
