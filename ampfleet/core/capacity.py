"""Queries about fleet capacity that several processes share."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core.models import Allocation


def used_slots_by_node(session: Session) -> dict[str, int]:
    """Slots held by unreleased allocations, per node id."""
    rows = session.execute(
        select(Allocation.node_id, func.sum(Allocation.slots))
        .where(Allocation.released_at.is_(None))
        .group_by(Allocation.node_id)
    )
    return {node_id: int(used) for node_id, used in rows}
