"""The Slurm pool: the compute-backend boundary (core/backends.py) implemented on slurmrestd.

Every call to slurmrestd runs on a thread of the backend's own, the link, never inside a
transaction and never on the scheduling pass's thread, so a slow or hanging slurmrestd
(its client waits 15 s a call) holds no row or lock and delays no placement on ampfleet's
own nodes. The link, woken after each pass and at least every `scheduler_poll_s`:

1. submits what the passes placed on the pool (starts.py);
2. cancels the Slurm jobs the passes decided to cancel (watch.py);
3. reads the partition's nodes and every job: the latest observation.

Each pass, under its lock and in its transaction, applies the latest observation it has not
applied yet: the nodes mirrored into `nodes` rows (capacity as Slurm reports it; Slurm's
answer, at the time it was read, is their heartbeat), the jobs' end states turned into
transitions. Where slurmrestd could not be read, the pool's nodes are cordoned with the
reason (an expired token says so), and the starts wait with it: the nodes' heartbeats age
as any silent node's would, except where an attempt runs, whose agents keep their nodes
alive (workers/one_attempt.py).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.backends import BACKEND_LABEL, POOL_LABEL, backend_queue
from ampfleet.core.models import Allocation, Node, utcnow
from ampfleet.core.settings import Settings
from ampfleet.scheduler.slurm.client import SlurmClient, SlurmError, SlurmJob, SlurmNode
from ampfleet.scheduler.slurm.names import BACKEND, node_id
from ampfleet.scheduler.slurm.starts import relay_starts
from ampfleet.scheduler.slurm.watch import note_once, watch_jobs

log = logging.getLogger(__name__)
USABLE_STATES = ("idle", "mixed", "allocated", "completing")
UNUSABLE_FLAGS = ("drain", "down", "fail", "maint", "not_responding")
"""A node whose slurmd stopped answering is placed on no more, before Slurm marks it down."""
UNREACHABLE = "Slurm pool unreachable"
"""How a pool node's reason starts while slurmrestd cannot be read."""


@dataclass(frozen=True)
class Observation:
    """What slurmrestd said at `at`, or why it said nothing (`problem`)."""

    at: datetime
    nodes: list[SlurmNode] = field(default_factory=list)
    jobs: list[SlurmJob] = field(default_factory=list)
    problem: str | None = None


class SlurmBackend:
    def __init__(self, settings: Settings, client: SlurmClient | None = None) -> None:
        self.settings = settings
        self.pool = settings.slurm_pool
        self.queue = backend_queue(BACKEND, self.pool)
        token = settings.slurm_token.get_secret_value() if settings.slurm_token else None
        self.client = client or SlurmClient(
            settings.slurm_url,
            user=settings.slurm_user,
            token=token,
            token_file=settings.slurm_token_file,
        )
        self.observed: Observation | None = None
        """The link's latest observation (replaced whole: no lock needed to read it)."""
        self._applied: Observation | None = None
        self._applying: Observation | None = None
        self._decided: list[int] = []
        self._to_cancel: set[int] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._link = threading.Thread(target=self._run_link, name="slurm-link", daemon=True)

    # -- the link: every Slurm call -------------------------------------------------------

    def start(self) -> None:
        self._link.start()

    def stop(self) -> None:
        """Ask the link to stop; not waited for (a call may hang on slurmrestd): a submit
        cut short is found by its name next time (starts.py)."""
        self._stop.set()
        self._wake.set()

    def _run_link(self) -> None:
        while not self._stop.is_set():
            self.link_round()
            self._wake.wait(self.settings.scheduler_poll_s)
            self._wake.clear()

    def link_round(self) -> None:
        """Submit, cancel, observe; each step's failure is the next round's to retry."""
        for step in (self._relay, self._cancel, self.observe):
            if self._stop.is_set():
                return
            try:
                step()
            except Exception:
                log.exception("Slurm pool %s: the link's %s failed", self.pool, step.__name__)

    def _relay(self) -> None:
        relay_starts(self.settings, self.client, self.queue)

    def _cancel(self) -> None:
        with self._lock:
            pending, self._to_cancel = self._to_cancel, set()
        for slurm_id in sorted(pending):
            try:
                self.client.cancel(slurm_id)
            except SlurmError as error:
                log.warning("Slurm pool %s: cancel %s: %s", self.pool, slurm_id, error)
                if not error.refused:
                    with self._lock:
                        self._to_cancel.add(slurm_id)

    def observe(self) -> Observation:
        now = utcnow()
        try:
            # Jobs first: a job Slurm requeued for a failed node is then read with that node
            # already out of service (watch.py names it).
            jobs = self.client.jobs()
            observed = Observation(now, self.client.nodes(), jobs)
        except SlurmError as error:
            log.warning("Slurm pool %s: %s", self.pool, error)
            observed = Observation(now, problem=str(error))
        self.observed = observed
        return observed

    # -- each pass: no Slurm call ---------------------------------------------------------

    def sync(self, session: Session, now: datetime) -> None:
        """Apply the latest observation, once, inside the pass's transaction."""
        del now  # the nodes' heartbeat is when Slurm answered, not when this pass runs
        observed = self.observed
        if observed is None or observed is self._applied:
            return
        self._applying = observed
        if observed.problem is not None:
            self._cordon_pool(session, observed.problem)
            return
        self.mirror_nodes(session, observed.nodes, observed.at)
        self._decided = watch_jobs(session, observed.jobs)

    def passed(self) -> None:
        """The pass committed: what it decided goes to the link, which it wakes."""
        with self._lock:
            self._to_cancel.update(self._decided)
        self._decided = []
        if self._applying is not None:
            self._applied, self._applying = self._applying, None
        self._wake.set()

    def mirror_nodes(self, session: Session, found: list[SlurmNode], at: datetime) -> None:
        partition = self.settings.slurm_partition
        seen = set()
        for one in found:
            if partition and partition not in one.partitions:
                continue
            seen.add(node_id(self.pool, one.name))
            self._mirror(session, one, at)
        for node in self._pool_nodes(session, excluding=seen):
            node.state, node.state_reason = "cordoned", "no longer in the Slurm partition"

    def _tell_its_attempts(self, session: Session, node: str, fields: dict[str, Any]) -> None:
        """A node Slurm took out of service (drained, down, not responding): every attempt
        that runs there hears why, with Slurm's words, before any of it ends."""
        running = session.execute(
            select(Allocation.job_id, Allocation.attempt)
            .where(Allocation.node_id == node, Allocation.released_at.is_(None))
            .distinct()
        ).all()
        for job_id, attempt in running:
            note_once(
                session,
                job_id,
                attempt,
                "slurm_node_out_of_service",
                f"node {fields['labels']['slurm_node']} of attempt {attempt} is out of service "
                f"in Slurm ({fields['state_reason']})",
            )

    def _cordon_pool(self, session: Session, problem: str) -> None:
        """Nothing more is placed on the pool while slurmrestd cannot be read; the nodes say
        why, in /v1/nodes and in the reasons of the jobs that wait for them."""
        for node in self._pool_nodes(session):
            node.state, node.state_reason = "cordoned", f"{UNREACHABLE}: {problem}"

    def _pool_nodes(self, session: Session, excluding: set[str] | None = None) -> list[Node]:
        query = select(Node).where(Node.queue == self.queue)
        if excluding is not None:
            query = query.where(Node.id.not_in(excluding or {""}))
        return list(session.scalars(query).all())

    def _mirror(self, session: Session, found: SlurmNode, at: datetime) -> None:
        gpus_per_slot = self.settings.slurm_gpus_per_slot
        if gpus_per_slot:
            accelerator, slots = "cuda", found.gpus // gpus_per_slot
        else:
            accelerator, slots = "cpu", found.cpus // self.settings.slurm_cpus_per_slot
        usable = found.state.split("+")[0] in USABLE_STATES and not any(
            flag in found.state for flag in UNUSABLE_FLAGS
        )
        fields = {
            "queue": self.queue,
            "address": found.address or found.name,
            "accelerator": accelerator,
            "slots": slots,
            "memory_mb": found.memory_mb or None,
            "labels": {
                BACKEND_LABEL: BACKEND,
                POOL_LABEL: self.pool,
                "slurm_node": found.name,
                "slurm_state": found.state,
                "slurm_cpus": str(found.cpus),
                "slurm_alloc_cpus": str(found.alloc_cpus),
                "slurm_gpus": str(found.gpus),
            },
            "state": "ready" if usable else "cordoned",
            "state_reason": None if usable else f"Slurm: {found.state} {found.reason}".strip(),
        }
        node = session.get(Node, node_id(self.pool, found.name))
        if not usable and (node is None or node.state == "ready"):
            self._tell_its_attempts(session, node_id(self.pool, found.name), fields)
        if node is None:
            session.add(
                Node(
                    id=node_id(self.pool, found.name),
                    registered_at=at,
                    last_heartbeat_at=at,
                    **fields,
                )
            )
            return
        for name, value in fields.items():
            if getattr(node, name) != value:
                setattr(node, name, value)
        # An attempt's agent on the node may have beaten since Slurm answered.
        node.last_heartbeat_at = max(node.last_heartbeat_at, at)
