"""Submitting what the scheduler placed on the Slurm pool, with no transaction open while
slurmrestd is asked anything.

A start message (core/backends.py, point 3) is relayed in three steps: a short transaction
reads the attempt and builds its batch job; outside any transaction the job's name is
looked up in Slurm and, only where Slurm has none, submitted; a second transaction marks the
message sent and records `slurm_submitted`. A scheduler that dies between the submit and
that commit leaves the message unsent, and the next relay finds the job by its name
(names.py) instead of submitting it again. Two schedulers never relay at once: the relay
holds a PostgreSQL advisory lock of its own on a connection with no transaction open, so
the scheduling passes (under the pass's lock) go on meanwhile.

Slurm refusing the job (a bad partition, a limit) fails the attempt with Slurm's words.
slurmrestd away, slow or refusing ampfleet's credentials (401/403: an expired or rotated
token) is not the job's fault: the start waits, saying why once, and is tried again.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from ampfleet.core.db import get_engine, session_scope
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Job, JobEvent, OutboxMessage, utcnow
from ampfleet.core.settings import Settings
from ampfleet.core.states import SLOT_HOLDING_STATES, JobState
from ampfleet.scheduler.slurm.client import BatchJob, SlurmClient, SlurmError
from ampfleet.scheduler.slurm.environment import batch_environment
from ampfleet.scheduler.slurm.names import slurm_job_name
from ampfleet.scheduler.slurm.watch import note_once

log = logging.getLogger(__name__)
RELAY_LOCK_KEY = 0x616D70736C75726D  # "ampslurm": one scheduler submits at a time
BATCH_SIZE = 50
DISCARDED_OUTPUT = "/dev/null"
WORKING_DIRECTORY = "/tmp"  # noqa: S108 - exists on every node; the agent uses its own folders


@dataclass(frozen=True)
class Start:
    message_id: int
    job_id: str
    attempt: int


def relay_starts(settings: Settings, client: SlurmClient, queue: str) -> int:
    """Submit what was placed on the pool (`queue`: its outbox queue); how many were
    handled. Stops at the first start slurmrestd could not take: the rest wait with it."""
    with relay_lock() as held:
        if not held:
            return 0  # another scheduler is relaying
        with session_scope() as session:
            starts = pending_starts(session, queue)
        handled = 0
        for start in starts:
            if not _relay(settings, client, start):
                break
            handled += 1
        return handled


def pending_starts(session: Session, queue: str) -> list[Start]:
    messages = session.scalars(
        select(OutboxMessage)
        .where(OutboxMessage.queue == queue, OutboxMessage.sent_at.is_(None))
        .order_by(OutboxMessage.id)
        .limit(BATCH_SIZE)
    ).all()
    return [Start(m.id, str(m.kwargs["job_id"]), int(m.kwargs["attempt"])) for m in messages]


def _relay(settings: Settings, client: SlurmClient, start: Start) -> bool:
    """One start; False where slurmrestd could not take it (it waits)."""
    with session_scope() as session:
        batch = _batch_to_submit(session, settings, start)
    if batch is None:
        with session_scope() as session:
            _mark_sent(session, start)
        return True
    try:
        found = client.find(batch.name)
        if found:
            slurm_id, how = found[-1].job_id, "found already submitted"
        else:
            slurm_id, how = client.submit(batch), "submitted"
    except SlurmError as error:
        with session_scope() as session:
            if error.refused:
                _refused(session, start, error)
                _mark_sent(session, start)
            else:
                _waits(session, start, error)
        return error.refused
    with session_scope() as session:
        _mark_sent(session, start)
        session.add(
            JobEvent(
                job_id=start.job_id,
                attempt=start.attempt,
                kind="info",
                reason="slurm_submitted",
                message=f"attempt {start.attempt} {how} as Slurm job {slurm_id} "
                f"({batch.nodes} node(s); partition {batch.partition or 'the default'})",
            )
        )
    return True


def _batch_to_submit(session: Session, settings: Settings, start: Start) -> BatchJob | None:
    """The batch job of a start that still wants one; None for one cancelled or lost before
    it was submitted, or whose agents have claimed it already (it was submitted)."""
    job = session.get(Job, start.job_id)
    if (
        job is None
        or job.attempt != start.attempt
        or JobState(job.state) not in SLOT_HOLDING_STATES
    ):
        return None
    allocations = session.scalars(
        select(Allocation)
        .where(Allocation.job_id == start.job_id, Allocation.attempt == start.attempt)
        .order_by(Allocation.node_rank)
    ).all()
    if not allocations or any(a.launched_at or a.released_at for a in allocations):
        return None
    return batch_job(settings, job, allocations)


def batch_job(settings: Settings, job: Job, allocations: Sequence[Allocation]) -> BatchJob:
    """One task per node with every CPU (and GPU) of the node's slots, whose step runs the
    attempt's agent on each node; the environment of environment.py, nothing more."""
    slots = max(a.slots for a in allocations)
    python = settings.slurm_python or sys.executable
    runtime = (job.resolved.get("stop") or {}).get("max_runtime_s")
    limit = math.ceil((runtime + settings.slurm_time_margin_s) / 60) if runtime else None
    agent = [python, "-m", "ampfleet.cli", "run-attempt", "--pool", settings.slurm_pool]
    agent += ["--job", job.id, "--attempt", str(job.attempt)]
    if settings.slurm_node_settings_file:
        agent += ["--settings-file", settings.slurm_node_settings_file]
    script = (
        "#!/bin/bash\n"
        f"# ampfleet job {job.id} attempt {job.attempt}: one ampfleet agent per node,\n"
        "# which launches the attempt's ranks there and reports them to ampfleet.\n"
        f"exec srun --kill-on-bad-exit=1 {shlex.join(agent)}\n"
    )
    output = settings.slurm_output_dir.rstrip("/")
    return BatchJob(
        name=slurm_job_name(job.id, job.attempt),
        script=script,
        nodes=len(allocations),
        tasks_per_node=1,
        cpus_per_task=slots * max(settings.slurm_cpus_per_slot, 1),
        gpus_per_task=slots * settings.slurm_gpus_per_slot,
        environment=batch_environment(settings, os.environ),
        working_directory=output or WORKING_DIRECTORY,
        standard_output=f"{output}/%x-%j.out" if output else DISCARDED_OUTPUT,
        time_limit_min=limit,
        comment=f"ampfleet job {job.id} attempt {job.attempt} project {job.project}",
        partition=settings.slurm_partition,
        account=settings.slurm_account,
        qos=settings.slurm_qos,
    )


def _mark_sent(session: Session, start: Start) -> None:
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == start.message_id, OutboxMessage.sent_at.is_(None))
        .values(sent_at=utcnow(), send_attempts=OutboxMessage.send_attempts + 1)
    )


def _waits(session: Session, start: Start, error: SlurmError) -> None:
    log.warning("Slurm: %s; the start of %s waits", error, start.job_id)
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == start.message_id)
        .values(send_attempts=OutboxMessage.send_attempts + 1)
    )
    note_once(
        session,
        start.job_id,
        start.attempt,
        "slurm_start_waits",
        f"the start waits for slurmrestd, tried again each pass: {error}",
    )


def _refused(session: Session, start: Start, error: SlurmError) -> None:
    why = f"Slurm refused the job: {error}"
    transition(
        session,
        start.job_id,
        JobState.FAILED,
        from_states={JobState.SCHEDULED},
        attempt=start.attempt,
        reason="slurm_refused",
        message=why,
        failure_reason=why,
    )
    session.execute(
        update(Allocation)
        .where(
            Allocation.job_id == start.job_id,
            Allocation.attempt == start.attempt,
            Allocation.released_at.is_(None),
        )
        .values(released_at=utcnow())
        .execution_options(synchronize_session=False)
    )


@contextmanager
def relay_lock() -> Iterator[bool]:
    """Whether this process may relay now: a session-level advisory lock on a connection of
    its own, which holds no transaction open meanwhile (SQLite: one scheduler, always)."""
    engine = get_engine()
    if engine.dialect.name != "postgresql":
        yield True
        return
    key = {"k": RELAY_LOCK_KEY}
    with engine.connect() as connection:
        held = bool(connection.scalar(text("SELECT pg_try_advisory_lock(:k)"), key))
        connection.commit()
        try:
            yield held
        finally:
            if held:
                try:
                    connection.execute(text("SELECT pg_advisory_unlock(:k)"), key)
                    connection.commit()
                except Exception:
                    connection.invalidate()  # closed: the server lets the lock go with it
                    raise
