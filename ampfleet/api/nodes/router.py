from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from ampfleet.api.deps import SessionDep
from ampfleet.api.nodes import repository
from ampfleet.api.nodes.schemas import NodeList, NodeOut
from ampfleet.core.settings import get_settings

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@router.get("", response_model=NodeList, summary="Worker nodes, their capacity and liveness")
def list_nodes(session: SessionDep) -> NodeList:
    now = datetime.now(UTC)
    timeout = get_settings().node_timeout_s
    used = repository.used_slots_by_node(session)
    items = []
    for node in repository.all_nodes(session):
        age = (now - node.last_heartbeat_at).total_seconds()
        node_used = used.get(node.id, 0)
        items.append(
            NodeOut(
                id=node.id,
                accelerator=node.accelerator,
                slots=node.slots,
                used_slots=node_used,
                free_slots=max(node.slots - node_used, 0),
                gpu_model=node.gpu_model,
                gpu_memory_mb=node.gpu_memory_mb,
                labels=node.labels,
                state=node.state,
                alive=age <= timeout,
                last_heartbeat_at=node.last_heartbeat_at,
                heartbeat_age_seconds=round(age, 3),
                registered_at=node.registered_at,
            )
        )
    return NodeList(items=items)
