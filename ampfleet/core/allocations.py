"""Who releases an attempt's allocation rows, and when; and what the last release means.

The allocation rows are the ledger of node slots: a slot is used while an unreleased
allocation holds it, whatever the job's state says. The contract is that a node's slots come
back only once every rank the attempt started there has exited, so two gangs never share a
device. Hence each row is released by whoever can know that for its node:

- nobody claimed it yet (no start message was acted on, so no process exists): released by
  the transition that ends or requeues the attempt (core/lifecycle.py), which also fences
  off the late message, since a claim needs an unreleased row;
- a node claimed it: released by that node once its processes have exited, or once it has
  decided not to launch them; or by the node's next incarnation at start (the ranks died
  with the worker that launched them). A node that stops heartbeating keeps its claimed
  rows: its attempts are requeued elsewhere, but nothing proves its ranks have exited (a
  partitioned node still runs them until it sees the attempt is over), and a dead node's
  slots are not placed on anyway.

The ledger also says when an attempt that was asked to stop (CANCELLING, PREEMPTED) has
stopped: once no node holds a claimed row of it, no rank of it runs or ever will (a node
launches only after moving the job to STARTING, which a stopping job never is). So whoever
releases the last claimed row ends it (`end_if_stopped`): a cancel ends CANCELLED, a
preemption goes back to the queue. The reaper does the same for any stopping attempt it
finds with none (`stopped_attempts`), a backstop for a releaser that died in between.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, exists, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Job, utcnow
from ampfleet.core.states import STOPPING_STATES, JobState


def _claimed_share_held(
    job_id: str | InstrumentedAttribute[str], attempt: int | InstrumentedAttribute[int]
) -> ColumnElement[bool]:
    """Some node claimed a row of the attempt and has not let go of it yet."""
    return exists().where(
        Allocation.job_id == job_id,
        Allocation.attempt == attempt,
        Allocation.launched_at.is_not(None),
        Allocation.released_at.is_(None),
    )


def release_node_share(session: Session, job_id: str, attempt: int, node_rank: int) -> None:
    """This node's processes of the attempt have exited (or were never started); if the
    attempt was being stopped and no other node holds it, it has stopped."""
    session.execute(
        update(Allocation)
        .where(
            Allocation.job_id == job_id,
            Allocation.attempt == attempt,
            Allocation.node_rank == node_rank,
            Allocation.released_at.is_(None),
        )
        .values(released_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    end_if_stopped(session, job_id, attempt)


def end_if_stopped(session: Session, job_id: str, attempt: int) -> JobState | None:
    """A CANCELLING attempt that no node holds a claimed row of ends CANCELLED; a PREEMPTED
    one goes back to the queue. The state it ended in, or None when it still runs somewhere
    (or was not being stopped)."""
    # The job's row lock orders the nodes releasing their shares of one attempt at once:
    # the last of them to take it sees every other release committed, so one of them ends it.
    state = session.scalar(
        select(Job.state).where(Job.id == job_id, Job.attempt == attempt).with_for_update()
    )
    if state is None or JobState(state) not in STOPPING_STATES:
        return None
    if session.scalar(select(_claimed_share_held(job_id, attempt))):
        return None
    if transition(
        session,
        job_id,
        JobState.CANCELLED,
        from_states={JobState.CANCELLING},
        attempt=attempt,
        reason="cancelled",
        message="no rank of it runs on any node",
    ):
        return JobState.CANCELLED
    if transition(
        session,
        job_id,
        JobState.QUEUED,
        from_states={JobState.PREEMPTED},
        attempt=attempt,
        reason="requeued_after_preemption",
        message="no rank of it runs on any node; back in the queue",
    ):
        return JobState.QUEUED
    return None


def stopped_attempts(session: Session) -> list[tuple[str, int]]:
    """Jobs being stopped whose current attempt no node holds a claimed row of."""
    rows = session.execute(
        select(Job.id, Job.attempt).where(
            Job.state.in_([s.value for s in STOPPING_STATES]),
            ~_claimed_share_held(Job.id, Job.attempt),
        )
    ).all()
    return [(job_id, attempt) for job_id, attempt in rows]


def release_claimed_on_node(session: Session, node_id: str) -> None:
    """The node's worker restarted: the ranks it had launched died with it (their parent
    death signal). Unclaimed rows stay: their start messages are still on the way."""
    session.execute(
        update(Allocation)
        .where(
            Allocation.node_id == node_id,
            Allocation.released_at.is_(None),
            Allocation.launched_at.is_not(None),
        )
        .values(released_at=utcnow())
        .execution_options(synchronize_session=False)
    )
