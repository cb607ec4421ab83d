"""What readiness means: each dependency a request needs answers. Liveness has no rule: a
process that answers HTTP is alive, whatever its dependencies do, so an orchestrator that
restarts on failed liveness never restarts every API process for a database outage."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from ampfleet.api.errors import ErrorDetail
from ampfleet.core.db import database_unavailable
from ampfleet.core.messaging import broker_reachable


def unavailable(session: Session) -> list[ErrorDetail]:
    """One detail per dependency that does not answer (the database, the broker), naming why."""
    problems = []
    try:
        session.execute(text("SELECT 1"))
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        session.rollback()
        cause = getattr(exc, "orig", None) or exc  # the driver's words, without the SQL
        said = (str(cause).strip().splitlines() or [""])[0][:300]
        problems.append(ErrorDetail(field="database", message=f"{type(cause).__name__}: {said}"))
    broker = broker_reachable()
    if broker:
        problems.append(ErrorDetail(field="broker", message=broker))
    return problems
