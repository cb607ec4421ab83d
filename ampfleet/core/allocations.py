"""Who releases an attempt's allocation rows, and when.

The allocation rows are the ledger of node slots: a slot is used while an unreleased
allocation holds it, whatever the job's state says. The contract is that a node's slots come
back only once every rank the attempt started there has exited, so two gangs never share a
device. Hence each row is released by whoever can know that for its node:

- nobody claimed it yet (no start message was acted on, so no process exists): released by
  the transition that ends or requeues the attempt, which also fences off the late message,
  since a claim needs an unreleased row;
- a node claimed it: released by that node once its processes have exited, or once it has
  decided not to launch them; or by the node's next incarnation at start (the ranks died
  with the worker that launched them). A node that stops heartbeating keeps its claimed
  rows: its attempts are requeued elsewhere, but nothing proves its ranks have exited (a
  partitioned node still runs them until it sees the attempt is over), and a dead node's
  slots are not placed on anyway.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from ampfleet.core.models import Allocation, utcnow


def release_unclaimed(session: Session, job_id: str) -> None:
    """The attempt is over or requeued: free what no node has claimed."""
    session.execute(
        update(Allocation)
        .where(
            Allocation.job_id == job_id,
            Allocation.released_at.is_(None),
            Allocation.launched_at.is_(None),
        )
        .values(released_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def release_node_share(session: Session, job_id: str, attempt: int, node_rank: int) -> None:
    """This node's processes of the attempt have exited (or were never started)."""
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
