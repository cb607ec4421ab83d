"""The Slurm pool: the compute-backend boundary (core/backends.py) implemented on slurmrestd.

Each scheduling pass, under the pass's lock: mirror the partition's nodes into `nodes` rows
(capacity as Slurm reports it; Slurm answering is their heartbeat), and turn the end states
of ampfleet's Slurm jobs into transitions (watch.py). After the pass commits, submit the
attempts it placed here.

An attempt is one batch job named after the job and attempt (`slurm_job_name`): one task
per node, with every CPU (and GPU) of the node's slots, whose step runs `ampfleet
run-attempt` on each node: ampfleet's own node agent for that one attempt. Submitting looks
the name up first, and the start message is marked relayed in the same transaction that
follows the submit, so a scheduler killed between the two finds its job on the next pass
instead of submitting it twice. Slurm's own requeue is off: a restart is ampfleet's, made
with the job's retry policy, from its checkpoint.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core.backends import BACKEND_LABEL, POOL_LABEL, backend_queue
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Job, JobEvent, Node, OutboxMessage, utcnow
from ampfleet.core.settings import Settings
from ampfleet.core.states import SLOT_HOLDING_STATES, JobState
from ampfleet.scheduler.slurm.client import BatchJob, SlurmClient, SlurmError, SlurmNode
from ampfleet.scheduler.slurm.names import BACKEND, node_id, slurm_job_name
from ampfleet.scheduler.slurm.watch import watch_jobs

log = logging.getLogger(__name__)
USABLE_STATES = ("idle", "mixed", "allocated", "completing")
PASSED_VARIABLES = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ", "HOME", "SLURM_CONF")
"""Besides every AMPFLEET_* one: what the agent needs to run the same way on the node."""


class SlurmBackend:
    def __init__(self, settings: Settings, client: SlurmClient | None = None) -> None:
        self.settings = settings
        self.pool = settings.slurm_pool
        self.queue = backend_queue(BACKEND, self.pool)
        token = settings.slurm_token.get_secret_value() if settings.slurm_token else None
        self.client = client or SlurmClient(
            settings.slurm_url, user=settings.slurm_user, token=token
        )

    # -- each pass --------------------------------------------------------------------------

    def sync(self, session: Session, now: datetime) -> None:
        """Mirror the nodes, then act on the jobs' states; Slurm away: try next pass (the
        nodes' heartbeats age meanwhile, as any silent node's would)."""
        try:
            self.mirror_nodes(session, now)
            watch_jobs(session, self.client)
        except SlurmError as error:
            log.warning("Slurm pool %s: %s", self.pool, error)

    def mirror_nodes(self, session: Session, now: datetime) -> None:
        partition = self.settings.slurm_partition
        seen = set()
        for found in self.client.nodes():
            if partition and partition not in found.partitions:
                continue
            seen.add(node_id(self.pool, found.name))
            self._mirror(session, found, now)
        gone = session.scalars(
            select(Node).where(Node.queue == self.queue, Node.id.not_in(seen or {""}))
        ).all()
        for node in gone:
            node.state, node.state_reason = "cordoned", "no longer in the Slurm partition"

    def _mirror(self, session: Session, found: SlurmNode, now: datetime) -> None:
        gpus_per_slot = self.settings.slurm_gpus_per_slot
        if gpus_per_slot:
            accelerator, slots = "cuda", found.gpus // gpus_per_slot
        else:
            accelerator, slots = "cpu", found.cpus // self.settings.slurm_cpus_per_slot
        usable = found.state.split("+")[0] in USABLE_STATES and not any(
            flag in found.state for flag in ("drain", "down", "fail", "maint")
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
            "last_heartbeat_at": now,
        }
        node = session.get(Node, node_id(self.pool, found.name))
        if node is None:
            session.add(Node(id=node_id(self.pool, found.name), registered_at=now, **fields))
            return
        for name, value in fields.items():
            if getattr(node, name) != value:
                setattr(node, name, value)

    # -- after the pass commits: the starts -------------------------------------------------

    def relay_starts(self, session: Session) -> int:
        """Submit what the pass placed on this pool; returns how many were handled."""
        messages = session.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.queue == self.queue, OutboxMessage.sent_at.is_(None))
            .order_by(OutboxMessage.id)
            .limit(50)
        ).all()
        handled = 0
        for message in messages:
            try:
                self._start(session, str(message.kwargs["job_id"]), int(message.kwargs["attempt"]))
            except SlurmError as error:
                if error.refused:
                    self._refused(session, message, error)
                else:
                    log.warning("Slurm pool %s: %s; the start waits", self.pool, error)
                    message.send_attempts += 1
                    break
            message.sent_at = utcnow()
            message.send_attempts += 1
            handled += 1
        return handled

    def _start(self, session: Session, job_id: str, attempt: int) -> None:
        job = session.get(Job, job_id)
        if job is None or job.attempt != attempt or JobState(job.state) not in SLOT_HOLDING_STATES:
            return  # cancelled or lost before it was submitted: nothing to start
        allocations = session.scalars(
            select(Allocation)
            .where(Allocation.job_id == job_id, Allocation.attempt == attempt)
            .order_by(Allocation.node_rank)
        ).all()
        if not allocations or any(a.launched_at or a.released_at for a in allocations):
            return  # its agents have already claimed it: it was submitted
        name = slurm_job_name(job_id, attempt)
        existing = self.client.find(name)
        if existing:
            slurm_id, how = existing[-1].job_id, "found already submitted"
        else:
            slurm_id, how = self.client.submit(self._batch(job, allocations)), "submitted"
        session.add(
            JobEvent(
                job_id=job_id,
                attempt=attempt,
                kind="info",
                reason="slurm_submitted",
                message=f"attempt {attempt} {how} as Slurm job {slurm_id} "
                f"({len(allocations)} node(s); partition "
                f"{self.settings.slurm_partition or 'the default'})",
            )
        )

    def _batch(self, job: Job, allocations: Sequence[Allocation]) -> BatchJob:
        settings = self.settings
        slots = max(a.slots for a in allocations)
        python = settings.slurm_python or sys.executable
        runtime = (job.resolved.get("stop") or {}).get("max_runtime_s")
        limit = math.ceil((runtime + settings.slurm_time_margin_s) / 60) if runtime else None
        environment = {
            k: v
            for k, v in os.environ.items()
            if k.startswith("AMPFLEET_") or k in PASSED_VARIABLES
        }
        environment.update(settings.slurm_environment)
        environment["AMPFLEET_SLURM_POOL"] = self.pool
        script = (
            "#!/bin/bash\n"
            f"# ampfleet job {job.id} attempt {job.attempt}: one ampfleet agent per node,\n"
            "# which launches the attempt's ranks there and reports them to ampfleet.\n"
            f"exec srun --kill-on-bad-exit=1 {python} -m ampfleet.cli run-attempt "
            f"--job {job.id} --attempt {job.attempt}\n"
        )
        return BatchJob(
            name=slurm_job_name(job.id, job.attempt),
            script=script,
            nodes=len(allocations),
            tasks_per_node=1,
            cpus_per_task=slots * max(settings.slurm_cpus_per_slot, 1),
            gpus_per_task=slots * settings.slurm_gpus_per_slot,
            environment=environment,
            working_directory="/tmp",  # noqa: S108 - exists on every node; the agent uses its own
            time_limit_min=limit,
            comment=f"ampfleet job {job.id} attempt {job.attempt} project {job.project}",
            partition=settings.slurm_partition,
            account=settings.slurm_account,
            qos=settings.slurm_qos,
        )

    def _refused(self, session: Session, message: OutboxMessage, error: SlurmError) -> None:
        job_id, attempt = str(message.kwargs["job_id"]), int(message.kwargs["attempt"])
        text = f"Slurm refused the job: {error}"
        transition(
            session,
            job_id,
            JobState.FAILED,
            from_states={JobState.SCHEDULED},
            attempt=attempt,
            reason="slurm_refused",
            message=text,
            failure_reason=text,
        )
        session.execute(
            update(Allocation)
            .where(
                Allocation.job_id == job_id,
                Allocation.attempt == attempt,
                Allocation.released_at.is_(None),
            )
            .values(released_at=utcnow())
            .execution_options(synchronize_session=False)
        )
