"""Rules of the nodes resource: cordon, uncordon, drain."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.api.errors import NotFoundError
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Job, Node
from ampfleet.core.states import ACTIVE_STATES, JobState


def get(session: Session, node_id: str) -> Node:
    node = session.get(Node, node_id)
    if node is None:
        raise NotFoundError(f"node {node_id} not found")
    return node


def set_state(session: Session, node_id: str, state: str) -> Node:
    node = get(session, node_id)
    node.state = state
    session.flush()
    return node


def drain(session: Session, node_id: str) -> tuple[Node, list[str]]:
    """Cordon the node and preempt what runs there: each job checkpoints and goes back to
    the queue, to be placed elsewhere. Returns the preempted job ids."""
    node = set_state(session, node_id, "cordoned")
    jobs = session.execute(
        select(Job.id, Job.attempt)
        .join(Allocation, (Allocation.job_id == Job.id) & (Allocation.attempt == Job.attempt))
        .where(Allocation.node_id == node_id, Allocation.released_at.is_(None))
        .distinct()
    ).all()
    preempted = []
    for job_id, attempt in jobs:
        if transition(
            session,
            job_id,
            JobState.PREEMPTED,
            from_states=ACTIVE_STATES,
            attempt=attempt,
            reason="node_drained",
            message=f"node {node_id} is being drained",
        ):
            preempted.append(job_id)
    return node, preempted
