"""Turn what Slurm says of ampfleet's jobs into the lifecycle's transitions.

One `GET jobs` per pass. For each Slurm job ampfleet named (names.py):

- still pending or running, for an attempt ampfleet no longer runs (cancelled before it
  started, lost, requeued, ended): cancel it in Slurm; so is one still pending in Slurm
  whose job is being cancelled or preempted (no agent is there to stop it).
- ended while ampfleet still holds the attempt's slots: Slurm has killed every process of
  it, so the slots are released and the attempt ends per states.py: a cancel or preemption
  ampfleet asked for ends as asked; a time limit is TIMED_OUT; the rest are retried per the
  job's policy (a Slurm-side scancel, a node failure, preemption, out of memory).
- requeued by Slurm itself (a node failure or preemption, where the submit could not turn
  requeue off: 22.05's v0.0.38 ignores it) after the agents gave the attempt up: said once
  (`slurm_requeued`, with the pool's nodes out of service and Slurm's reasons, since the
  job record keeps no cause) and cancelled, as above; its CANCELLED end is then not news.
- ended after the agents had already recorded the attempt's end (a Slurm-side scancel or
  preemption signals the agents, which checkpoint and requeue it): the Slurm end state is
  added to the job's events once, so the job says why.

A running attempt's own end (SUCCEEDED, FAILED, TIMED_OUT by its stop policy) is recorded by
its agents, exactly as on ampfleet nodes; this only covers what they cannot see.
"""

from __future__ import annotations

import logging

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from ampfleet.core.allocations import end_if_stopped
from ampfleet.core.backends import backend_queue
from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.states import (
    LAUNCHED_STATES,
    SLOT_HOLDING_STATES,
    STOPPING_STATES,
    JobState,
)
from ampfleet.scheduler.slurm.client import SlurmClient, SlurmJob
from ampfleet.scheduler.slurm.names import BACKEND, parse_job_name
from ampfleet.scheduler.slurm.states import Meaning, Next, meaning

log = logging.getLogger(__name__)


def watch_jobs(session: Session, client: SlurmClient) -> None:
    for found in client.jobs():
        named = parse_job_name(found.name)
        if named is not None:
            _watch(session, client, found, *named)


def _watch(
    session: Session, client: SlurmClient, found: SlurmJob, job_id: str, attempt: int
) -> None:
    row = session.execute(select(Job.state, Job.attempt).where(Job.id == job_id)).one_or_none()
    if row is None:
        return  # not a job of this deployment (another one may share the cluster)
    held = session.scalar(
        select(
            exists().where(
                Allocation.job_id == job_id,
                Allocation.attempt == attempt,
                Allocation.released_at.is_(None),
            )
        )
    )
    state = JobState(row.state) if row is not None else None
    current = row is not None and row.attempt == attempt and state in SLOT_HOLDING_STATES and held
    said = meaning(found.state, found.job_id, found.reason)
    if said.next is Next.WAIT:
        stopping_unstarted = state in STOPPING_STATES and found.state == "PENDING"
        if not current or stopping_unstarted:
            if found.restarts and not current:
                _note_once(session, job_id, attempt, _requeued(session, found))
            log.info("cancelling Slurm job %s (%s attempt %s)", found.job_id, job_id, attempt)
            client.cancel(found.job_id)
        return
    if not current:
        # A requeued job ends CANCELLED by the cancel above: ampfleet's own, not news.
        requeued_then_cancelled = found.restarts and said.next is Next.CANCELLED
        if said.next is not Next.ENDED and not requeued_then_cancelled:
            _note_once(session, job_id, attempt, said)
        return
    _release(session, job_id, attempt)
    if state in STOPPING_STATES:
        end_if_stopped(session, job_id, attempt)
    elif said.next is Next.TIMED_OUT and state in LAUNCHED_STATES:
        transition(
            session,
            job_id,
            JobState.TIMED_OUT,
            from_states=LAUNCHED_STATES,
            attempt=attempt,
            reason=said.reason,
            message=said.message,
        )
    elif said.next is Next.ENDED:
        requeue_or_fail(
            session,
            job_id,
            attempt,
            reason="slurm_ended_unreported",
            message=f"{said.message}, but its agents recorded no end of the attempt",
        )
    else:
        requeue_or_fail(session, job_id, attempt, reason=said.reason, message=said.message)


def _release(session: Session, job_id: str, attempt: int) -> None:
    """Slurm ended the job: nothing of the attempt runs on any of its nodes any more."""
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


def _requeued(session: Session, found: SlurmJob) -> Meaning:
    """What to say of a Slurm job Slurm itself requeued: the one cause it leaves behind is
    the pool's nodes that are down or drained, with Slurm's reason (mirrored by backend.py);
    the job record keeps only the restart count."""
    lost = session.scalars(
        select(Node)
        .where(Node.queue.like(backend_queue(BACKEND, "") + "%"), Node.state == "cordoned")
        .order_by(Node.id)
    ).all()
    why = "; ".join(f"{n.labels.get('slurm_node', n.id)}: {n.state_reason}" for n in lost)
    return Meaning(
        Next.RETRY,
        "slurm_requeued",
        f"Slurm requeued job {found.job_id} (restart {found.restarts}), as it does after a "
        "node failure or a preemption"
        + (f"; nodes out of service: {why}" if why else "")
        + "; ampfleet retries attempts itself, so the requeued job is cancelled",
    )


def _note_once(session: Session, job_id: str, attempt: int, said: Meaning) -> None:
    noted = session.scalar(
        select(
            exists().where(
                JobEvent.job_id == job_id,
                JobEvent.attempt == attempt,
                JobEvent.reason == said.reason,
            )
        )
    )
    if not noted:
        session.add(
            JobEvent(
                job_id=job_id,
                attempt=attempt,
                kind="info",
                reason=said.reason,
                message=said.message,
            )
        )
