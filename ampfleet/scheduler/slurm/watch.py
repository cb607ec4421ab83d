"""Turn what Slurm says of ampfleet's jobs into the lifecycle's transitions.

The jobs come from the latest `GET jobs` (backend.py reads it outside any transaction); this
runs inside the pass's, and asks Slurm nothing: the Slurm jobs to cancel are returned, and
cancelled once the pass has committed. For each Slurm job ampfleet named (names.py):

- still pending or running, for an attempt ampfleet no longer runs (cancelled before it
  started, lost, requeued, ended): cancel it in Slurm; so is one still pending in Slurm
  whose job is being cancelled or preempted (no agent is there to stop it).
- ended while ampfleet still holds the attempt's slots: Slurm has killed every process of
  it, so the slots are released and the attempt ends per states.py: a cancel or preemption
  ampfleet asked for ends as asked; a time limit is TIMED_OUT; out of memory FAILED (a
  restart would run out again); the rest are retried per the job's policy (a Slurm-side
  scancel, a node failure, preemption).
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
from collections.abc import Iterable

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from ampfleet.core.allocations import end_if_stopped
from ampfleet.core.backends import backend_queue
from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.states import (
    ACTIVE_STATES,
    LAUNCHED_STATES,
    SLOT_HOLDING_STATES,
    STOPPING_STATES,
    JobState,
)
from ampfleet.scheduler.slurm.client import SlurmJob
from ampfleet.scheduler.slurm.names import BACKEND, parse_job_name
from ampfleet.scheduler.slurm.states import Meaning, Next, meaning

log = logging.getLogger(__name__)


def watch_jobs(session: Session, jobs: Iterable[SlurmJob]) -> list[int]:
    """Act on `jobs` (Slurm's view); the ids of the Slurm jobs to cancel."""
    cancel: list[int] = []
    for found in jobs:
        named = parse_job_name(found.name)
        if named is not None and _watch(session, found, *named):
            cancel.append(found.job_id)
    return cancel


def _watch(session: Session, found: SlurmJob, job_id: str, attempt: int) -> bool:
    """Whether the Slurm job is to be cancelled."""
    row = session.execute(select(Job.state, Job.attempt).where(Job.id == job_id)).one_or_none()
    if row is None:
        return False  # not a job of this deployment (another one may share the cluster)
    held = session.scalar(
        select(
            exists().where(
                Allocation.job_id == job_id,
                Allocation.attempt == attempt,
                Allocation.released_at.is_(None),
            )
        )
    )
    state = JobState(row.state)
    current = row.attempt == attempt and state in SLOT_HOLDING_STATES and held
    said = meaning(found.state, found.job_id, found.reason)
    if said.next is Next.WAIT:
        stopping_unstarted = state in STOPPING_STATES and found.state == "PENDING"
        if not current or stopping_unstarted:
            if found.restarts and not current:
                requeued = _requeued(session, found)
                note_once(session, job_id, attempt, requeued.reason, requeued.message)
            log.info("cancelling Slurm job %s (%s attempt %s)", found.job_id, job_id, attempt)
            return True
        return False
    if not current:
        # Its agents recorded how the attempt ended, but may have been killed before they
        # gave its slots back: Slurm ending the job says nothing of it runs any more.
        _release(session, job_id, attempt)
        # Ended CANCELLED after Slurm requeued it, or after its attempt ended: the cancel
        # above (the agents were still exiting when Slurm was read), ampfleet's own, not news.
        attempt_over = row.attempt == attempt and state is not None and state.is_terminal()
        ours = said.next is Next.CANCELLED and (found.restarts or attempt_over)
        if said.next is not Next.ENDED and not ours:
            note_once(session, job_id, attempt, said.reason, said.message)
        return False
    _end(session, job_id, attempt, state, said)
    return False


_FINAL: dict[Next, tuple[JobState, frozenset[JobState]]] = {
    Next.TIMED_OUT: (JobState.TIMED_OUT, LAUNCHED_STATES),
    Next.FAILED: (JobState.FAILED, ACTIVE_STATES),
}
"""The Slurm ends that end the job, not the attempt, and from which states."""


def _end(
    session: Session, job_id: str, attempt: int, state: JobState | None, said: Meaning
) -> None:
    """Slurm ended the attempt's job while ampfleet still held its slots."""
    _release(session, job_id, attempt)
    final, from_states = _FINAL.get(said.next, (None, frozenset()))
    if state in STOPPING_STATES:
        end_if_stopped(session, job_id, attempt)
    elif final is not None and state in from_states:
        transition(
            session,
            job_id,
            final,
            from_states=from_states,
            attempt=attempt,
            reason=said.reason,
            message=said.message,
            failure_reason=said.message,
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


def note_once(session: Session, job_id: str, attempt: int, reason: str, message: str) -> None:
    """An info event of the attempt, unless one with this reason was said already."""
    noted = session.scalar(
        select(
            exists().where(
                JobEvent.job_id == job_id,
                JobEvent.attempt == attempt,
                JobEvent.reason == reason,
            )
        )
    )
    if not noted:
        session.add(
            JobEvent(job_id=job_id, attempt=attempt, kind="info", reason=reason, message=message)
        )
