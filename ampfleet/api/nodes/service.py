"""Rules of the nodes resource: capacity and liveness as answered; cordon, uncordon, drain."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.api.errors import NotFoundError
from ampfleet.api.nodes import repository
from ampfleet.api.nodes.schemas import NodeList, NodeOut
from ampfleet.core.fleet import heartbeat_age_s, is_alive
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Job, Node
from ampfleet.core.settings import get_settings
from ampfleet.core.states import ACTIVE_STATES, JobState


def to_out(node: Node, used: int, now: datetime) -> NodeOut:
    return NodeOut(
        id=node.id,
        accelerator=node.accelerator,
        slots=node.slots,
        used_slots=used,
        free_slots=max(node.slots - used, 0),
        gpu_model=node.gpu_model,
        gpu_memory_mb=node.gpu_memory_mb,
        memory_mb=node.memory_mb,
        labels=node.labels,
        state=node.state,
        state_reason=node.state_reason,
        alive=is_alive(node.last_heartbeat_at, now, get_settings().node_timeout_s),
        last_heartbeat_at=node.last_heartbeat_at,
        heartbeat_age_seconds=round(heartbeat_age_s(node.last_heartbeat_at, now), 3),
        registered_at=node.registered_at,
    )


def listing(session: Session) -> NodeList:
    now, used = datetime.now(UTC), repository.used_slots_by_node(session)
    nodes = repository.all_nodes(session)
    return NodeList(items=[to_out(node, used.get(node.id, 0), now) for node in nodes])


def describe(session: Session, node: Node) -> NodeOut:
    used = repository.used_slots_by_node(session).get(node.id, 0)
    return to_out(node, used, datetime.now(UTC))


def get(session: Session, node_id: str) -> Node:
    node = session.get(Node, node_id)
    if node is None:
        raise NotFoundError(f"node {node_id} not found")
    return node


def set_state(session: Session, node_id: str, state: str, reason: str | None = None) -> Node:
    node = get(session, node_id)
    node.state, node.state_reason = state, reason
    session.flush()
    return node


def drain(session: Session, node_id: str) -> tuple[Node, list[str]]:
    """Cordon the node and preempt what runs there: each job checkpoints and goes back to
    the queue, to be placed elsewhere. Returns the preempted job ids."""
    node = set_state(session, node_id, "cordoned", "drained by an operator")
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
