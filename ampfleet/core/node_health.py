"""Nodes whose attempts keep hanging are cordoned automatically (Determined's exclude_node,
built in). A hang restarts the attempt, perhaps on the same node; a node with a bad device,
link or driver would hang every job placed there the same way.

Counted: attempts that ended hung within `AMPFLEET_HANG_WINDOW_S` while they held slots on
the node. A cordoned node keeps what runs there and takes nothing new until an operator
uncordons it, which clears the reason.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.lifecycle import record_event
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.settings import Settings

HUNG = "hung"
"""The reason of the event that ends a hung attempt."""


def hangs_on_node(session: Session, node_id: str, window_s: float) -> int:
    """Attempts that ended hung within the window while they held slots on the node."""
    since = utcnow() - timedelta(seconds=window_s)
    placed = (Allocation.job_id == JobEvent.job_id) & (Allocation.attempt == JobEvent.attempt)
    rows = session.execute(
        select(JobEvent.job_id, JobEvent.attempt)
        .join(Allocation, placed)
        .where(Allocation.node_id == node_id, JobEvent.reason == HUNG, JobEvent.time >= since)
        .distinct()
    ).all()
    return len(rows)


def cordon_if_hanging(session: Session, node_id: str, job: Job, settings: Settings) -> bool:
    """After an attempt of `job` hung on the node: cordon it if that makes
    `AMPFLEET_CORDON_AFTER_HANGS`; the job's events say so."""
    if settings.cordon_after_hangs <= 0:
        return False
    hangs = hangs_on_node(session, node_id, settings.hang_window_s)
    node = session.get(Node, node_id)
    if hangs < settings.cordon_after_hangs or node is None or node.state != "ready":
        return False
    node.state = "cordoned"
    node.state_reason = (
        f"cordoned automatically: {hangs} attempts hung on it within "
        f"{settings.hang_window_s:.0f}s (AMPFLEET_CORDON_AFTER_HANGS={settings.cordon_after_hangs})"
    )
    record_event(
        session,
        job,
        "node_cordoned",
        f"node {node_id} {node.state_reason}; it takes no new work until it is uncordoned "
        f"(POST /v1/nodes/{node_id}/uncordon)",
    )
    return True
