"""Turn what Slurm says of ampfleet's jobs into the lifecycle's transitions.

One `GET jobs` per pass. For each Slurm job ampfleet named (names.py):

- still pending or running, for an attempt ampfleet no longer runs (cancelled before it
  started, lost, requeued, ended): cancel it in Slurm; so is one still pending in Slurm
  whose job is being cancelled or preempted (no agent is there to stop it).
- ended while ampfleet still holds the attempt's slots: Slurm has killed every process of
  it, so the slots are released and the attempt ends per states.py: a cancel or preemption
  ampfleet asked for ends as asked; a time limit is TIMED_OUT; the rest are retried per the
  job's policy (a Slurm-side scancel, a node failure, preemption, out of memory).
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
from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.models import Allocation, Job, JobEvent, utcnow
from ampfleet.core.states import (
    LAUNCHED_STATES,
    SLOT_HOLDING_STATES,
    STOPPING_STATES,
    JobState,
)
from ampfleet.scheduler.slurm.client import SlurmClient, SlurmJob
from ampfleet.scheduler.slurm.names import parse_job_name
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
            log.info("cancelling Slurm job %s (%s attempt %s)", found.job_id, job_id, attempt)
            client.cancel(found.job_id)
        return
    if not current:
        if said.next is not Next.ENDED:
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
