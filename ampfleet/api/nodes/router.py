"""HTTP of the nodes resource: capacity and liveness; cordon, uncordon, drain."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from ampfleet.api.auth import AdminPrincipal, CurrentPrincipal
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.nodes import repository, service
from ampfleet.api.nodes.schemas import DrainOut, NodeList, NodeOut
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.models import Node
from ampfleet.core.settings import get_settings

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


def _out(node: Node, used: int, now: datetime) -> NodeOut:
    age = (now - node.last_heartbeat_at).total_seconds()
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
        alive=age <= get_settings().node_timeout_s,
        last_heartbeat_at=node.last_heartbeat_at,
        heartbeat_age_seconds=round(age, 3),
        registered_at=node.registered_at,
    )


@router.get(
    "",
    response_model=NodeList,
    responses=responses(401),
    summary="Worker nodes, their capacity and liveness",
)
def list_nodes(session: SessionDep, _principal: CurrentPrincipal) -> NodeList:
    now = datetime.now(UTC)
    used = repository.used_slots_by_node(session)
    return NodeList(items=[_out(n, used.get(n.id, 0), now) for n in repository.all_nodes(session)])


@router.post(
    "/{node_id}/cordon",
    response_model=NodeOut,
    responses=responses(401, 403, 404),
    summary="Place no new work on the node; what runs there keeps running",
)
def cordon(node_id: str, session: SessionDep, _admin: AdminPrincipal) -> NodeOut:
    node = service.set_state(session, node_id, "cordoned")
    return _out(node, repository.used_slots_by_node(session).get(node_id, 0), datetime.now(UTC))


@router.post(
    "/{node_id}/uncordon",
    response_model=NodeOut,
    responses=responses(401, 403, 404),
    summary="Let the scheduler place work on the node again",
)
def uncordon(node_id: str, session: SessionDep, _admin: AdminPrincipal) -> NodeOut:
    node = service.set_state(session, node_id, "ready")
    session.commit()
    wake_scheduler()
    return _out(node, repository.used_slots_by_node(session).get(node_id, 0), datetime.now(UTC))


@router.post(
    "/{node_id}/drain",
    response_model=DrainOut,
    responses=responses(401, 403, 404),
    summary="Cordon, then preempt every job on the node (they checkpoint and requeue)",
)
def drain(node_id: str, session: SessionDep, _admin: AdminPrincipal) -> DrainOut:
    node, preempted = service.drain(session, node_id)
    used = repository.used_slots_by_node(session).get(node_id, 0)
    return DrainOut(node=_out(node, used, datetime.now(UTC)), preempted_jobs=preempted)
