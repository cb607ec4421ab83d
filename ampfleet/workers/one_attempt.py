"""`ampfleet run-attempt`: the node agent for one attempt, inside a compute backend's
allocation (a Slurm batch job's step: one task per node).

It is the same agent as `ampfleet worker`'s, minus what a long-lived node does: it does not
register (the backend mirrors its nodes), heartbeat (the backend's answers are the nodes'
heartbeats) or consume a queue. It takes this node's share of the attempt onto the node the
cluster gave it (node rank: Slurm's node id within the job), claims it and launches the ranks
exactly as a start message would, then waits until the supervisor has recorded how they
ended and released the share. Ranks, sandbox, records into the database, checkpoints,
uploads, cancel and runtime limits are the agent's usual ones.

A SIGTERM (a Slurm-side scancel, preemption, or its time limit) preempts the attempt: its
ranks checkpoint and it goes back to ampfleet's queue; the backend's watcher adds what
Slurm said (scheduler/slurm/watch.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

from sqlalchemy import select, update

from ampfleet.core.backends import pool_node_id
from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Node
from ampfleet.core.settings import Settings
from ampfleet.workers.agent import NodeAgent
from ampfleet.workers.node import detect_capacity

log = logging.getLogger(__name__)
POLL_S = 1.0


class OneAttemptAgent(NodeAgent):
    """A node agent that neither registers nor heartbeats: its node is the backend's."""

    def start(self) -> None:
        self.supervisor.start()
        self.rendezvous.start()


def run_attempt(settings: Settings, job_id: str, attempt: int) -> int:
    """Run this node's share of the attempt; the exit status: 0 once its end is recorded."""
    node_rank = int(os.environ.get("SLURM_NODEID", "0"))
    slurm_node = os.environ.get("SLURMD_NODENAME", settings.node_name)
    node_id = pool_node_id(settings.slurm_pool, slurm_node)
    slots = _take_share(job_id, attempt, node_rank, node_id)
    if slots is None:
        log.info("%s attempt %s node rank %s: nothing to run here", job_id, attempt, node_rank)
        return 0
    address = _address(node_id) or settings.node_address
    here = settings.model_copy(
        update={
            "node_name": node_id,
            "node_address": address,
            "node_cpu_slots": slots,
            "warm_sandbox": "never",  # no next attempt here to keep one for
        }
    )
    agent = OneAttemptAgent(here, detect_capacity(here))
    stopped = threading.Event()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    agent.start()
    agent.handle_start(job_id, attempt, node_rank)
    while not stopped.wait(POLL_S):
        if _released(job_id, attempt, node_rank):
            agent.stop()
            return 0
    log.info("%s attempt %s: signalled; preempting it", job_id, attempt)
    agent.stop(
        reason="slurm_signalled",
        message=f"the Slurm job was signalled on {slurm_node} (scancel, preemption or its "
        "time limit); the attempt checkpoints and goes back to the queue",
    )
    return 1


def _take_share(job_id: str, attempt: int, node_rank: int, node_id: str) -> int | None:
    """Move this node rank's unclaimed share onto the node Slurm chose; its slots, or None
    when there is none to run (stale, claimed already, released)."""
    with session_scope() as session:
        if session.get(Node, node_id) is None:
            raise RuntimeError(f"node {node_id} is not a node of the pool (yet)")
        session.execute(
            update(Allocation)
            .where(
                Allocation.job_id == job_id,
                Allocation.attempt == attempt,
                Allocation.node_rank == node_rank,
                Allocation.launched_at.is_(None),
                Allocation.released_at.is_(None),
            )
            .values(node_id=node_id)
            .execution_options(synchronize_session=False)
        )
        return session.scalar(
            select(Allocation.slots).where(
                Allocation.job_id == job_id,
                Allocation.attempt == attempt,
                Allocation.node_rank == node_rank,
                Allocation.node_id == node_id,
                Allocation.launched_at.is_(None),
                Allocation.released_at.is_(None),
            )
        )


def _address(node_id: str) -> str | None:
    with session_scope() as session:
        return session.scalar(select(Node.address).where(Node.id == node_id))


def _released(job_id: str, attempt: int, node_rank: int) -> bool:
    with session_scope() as session:
        released = session.scalar(
            select(Allocation.released_at).where(
                Allocation.job_id == job_id,
                Allocation.attempt == attempt,
                Allocation.node_rank == node_rank,
            )
        )
    return released is not None
