"""`ampfleet run-attempt`: the node agent for one attempt, inside a compute backend's
allocation (a Slurm batch job's step: one task per node).

It is the same agent as `ampfleet worker`'s, minus what a long-lived node does: it does not
register (the backend mirrors its nodes) or consume a queue. It takes this node's share of
the attempt onto the node the cluster gave it (node rank: Slurm's node id within the job),
claims it and launches the ranks exactly as a start message would, then waits until the
supervisor has recorded how they ended and released the share. Ranks, sandbox, records into
the database, checkpoints, uploads, cancel and runtime limits are the agent's usual ones.
While it runs it beats its node's heartbeat, so that a node running an attempt stays alive
while slurmrestd cannot be read (the backend's answers are the heartbeat of the others).

A SIGTERM is Slurm ending the job. Slurm's own state of the job says why (`scontrol`, as
every Slurm node has): its time limit ends the attempt TIMED_OUT, as ampfleet's own limit
would; anything else (a Slurm-side scancel, preemption, a lost peer node) preempts it: its
ranks checkpoint and it goes back to ampfleet's queue, and the backend's watcher adds what
Slurm said (scheduler/slurm/watch.py).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from types import FrameType

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core.backends import pool_node_id
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Node
from ampfleet.core.settings import Settings
from ampfleet.core.states import LAUNCHED_STATES, JobState
from ampfleet.workers.agent import NodeAgent
from ampfleet.workers.node import detect_capacity

log = logging.getLogger(__name__)
POLL_S = 1.0


SLURM_TIME_LIMIT = (
    ("JobState", "TIMEOUT"),
    ("JobState", "DEADLINE"),
    ("Reason", "TimeLimit"),
    ("Reason", "DeadLine"),
)
SCONTROL_TIMEOUT_S = 10.0
"""Slurm gives a signalled step KillWait (30 s by default) before SIGKILL."""


class OneAttemptAgent(NodeAgent):
    """A node agent that does not register: its node is the backend's."""

    def start(self) -> None:
        self.supervisor.start()
        self.rendezvous.start()
        self._heartbeat.start()

    def _register(self, session: Session) -> None:
        """The node's row is the backend's: a beat that finds none creates nothing."""


def run_attempt(settings: Settings, pool: str, job_id: str, attempt: int) -> int:
    """Run this node's share of the attempt on a node of `pool`; the exit status: 0 once
    its end is recorded."""
    node_rank = int(os.environ.get("SLURM_NODEID", "0"))
    slurm_node = os.environ.get("SLURMD_NODENAME", settings.node_name)
    node_id = pool_node_id(pool, slurm_node)
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
    # Slurm signalled the ranks too: none of their exits may be ended as a failure before
    # Slurm has said why (the supervisor holds their outcomes meanwhile).
    agent.supervisor.outcomes_held.set()
    try:
        reason, message = _signalled(job_id, attempt, slurm_node)
    finally:
        agent.supervisor.outcomes_held.clear()
    agent.stop(reason=reason, message=message)
    return 1


def _signalled(job_id: str, attempt: int, slurm_node: str) -> tuple[str, str]:
    """Why Slurm signalled the attempt's steps, recorded: its time limit ends the attempt
    TIMED_OUT; anything else preempts it. The event's reason and words."""
    slurm_says = _slurm_job_state()
    if _time_limit(slurm_says):
        log.info("%s attempt %s: Slurm's time limit; it ends TIMED_OUT", job_id, attempt)
        reason, target, from_states = "slurm_timeout", JobState.TIMED_OUT, LAUNCHED_STATES
        message = (
            f"the Slurm job reached its time limit (Slurm: {slurm_says}): set by the "
            "partition, an administrator, or stop.max_runtime_s plus "
            "AMPFLEET_SLURM_TIME_MARGIN_S"
        )
    else:
        log.info("%s attempt %s: signalled (Slurm: %s); preempting it", job_id, attempt, slurm_says)
        reason, target, from_states = "slurm_signalled", JobState.PREEMPTED, LAUNCHED_STATES
        message = (
            f"the Slurm job was signalled on {slurm_node} (Slurm says {slurm_says or 'nothing'}"
            ": a scancel, a preemption, a lost node); the attempt checkpoints and goes back to "
            "the queue"
        )
    with session_scope() as session:
        transition(
            session,
            job_id,
            target,
            from_states=from_states,
            attempt=attempt,
            reason=reason,
            message=message,
            failure_reason=message if target is JobState.TIMED_OUT else None,
        )
    return reason, message


def _slurm_job_state() -> str | None:
    """Slurm's state of this batch job now, `JobState=... Reason=...` (a job at its time
    limit is COMPLETING with the reason TimeLimit by the time its steps are signalled);
    None where Slurm could not say (no scontrol, or no answer within the time)."""
    slurm_job = os.environ.get("SLURM_JOB_ID")
    scontrol = shutil.which("scontrol")
    if not slurm_job or scontrol is None:
        return None
    deadline = time.monotonic() + SCONTROL_TIMEOUT_S
    # Slurm signals every process of the step, and may catch a scontrol just started: again.
    while (left := deadline - time.monotonic()) > 0:
        try:
            done = subprocess.run(
                [scontrol, "--oneliner", "show", "job", slurm_job],
                capture_output=True,
                text=True,
                timeout=left,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            log.warning("scontrol show job %s: %s", slurm_job, error)
            return None
        if found := re.findall(r"\b(JobState|Reason)=(\S+)", done.stdout):
            return " ".join(f"{key}={value}" for key, value in found)
        log.warning("scontrol show job %s: %s %s", slurm_job, done.returncode, done.stderr[:300])
        time.sleep(0.2)
    return None


def _time_limit(slurm_says: str | None) -> bool:
    """Whether Slurm's words are those of a time limit (its own or a deadline's)."""
    return slurm_says is not None and any(
        f"{key}={value}" in slurm_says.split() for key, value in SLURM_TIME_LIMIT
    )


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
