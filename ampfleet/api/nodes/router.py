"""HTTP of the nodes resource: capacity and liveness; cordon, uncordon, drain."""

from __future__ import annotations

from fastapi import APIRouter

from ampfleet.api.auth import AdminPrincipal, CurrentPrincipal
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.nodes import service
from ampfleet.api.nodes.schemas import DrainOut, NodeList, NodeOut
from ampfleet.core.db import after_commit
from ampfleet.core.messaging import wake_scheduler

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@router.get(
    "",
    response_model=NodeList,
    responses=responses(401),
    summary="Worker nodes, their capacity and liveness",
)
def list_nodes(session: SessionDep, _principal: CurrentPrincipal) -> NodeList:
    return service.listing(session)


@router.post(
    "/{node_id}/cordon",
    response_model=NodeOut,
    responses=responses(401, 403, 404),
    summary="Place no new work on the node; what runs there keeps running",
)
def cordon(node_id: str, session: SessionDep, _admin: AdminPrincipal) -> NodeOut:
    node = service.set_state(session, node_id, "cordoned", "cordoned by an operator")
    return service.describe(session, node)


@router.post(
    "/{node_id}/uncordon",
    response_model=NodeOut,
    responses=responses(401, 403, 404),
    summary="Let the scheduler place work on the node again",
)
def uncordon(node_id: str, session: SessionDep, _admin: AdminPrincipal) -> NodeOut:
    node = service.set_state(session, node_id, "ready")
    after_commit(session, wake_scheduler)  # work may be waiting for its slots
    return service.describe(session, node)


@router.post(
    "/{node_id}/drain",
    response_model=DrainOut,
    responses=responses(401, 403, 404),
    summary="Cordon, then preempt every job on the node (they checkpoint and requeue)",
)
def drain(node_id: str, session: SessionDep, _admin: AdminPrincipal) -> DrainOut:
    node, preempted = service.drain(session, node_id)
    return DrainOut(node=service.describe(session, node), preempted_jobs=preempted)
