from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.models import Node

__all__ = ["all_nodes", "used_slots_by_node"]


def all_nodes(session: Session) -> list[Node]:
    return list(session.scalars(select(Node).order_by(Node.id)))
