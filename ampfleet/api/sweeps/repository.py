"""Every query of the sweeps resource."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.api.auth import ProjectScope
from ampfleet.core.models import Job, Sweep, SweepEvent, SweepTrial
from ampfleet.core.states import TERMINAL_STATES


def get(session: Session, sweep_id: str) -> Sweep | None:
    return session.get(Sweep, sweep_id)


def trials(session: Session, sweep_id: str) -> list[SweepTrial]:
    return list(
        session.scalars(
            select(SweepTrial).where(SweepTrial.sweep_id == sweep_id).order_by(SweepTrial.number)
        )
    )


def counts(session: Session, sweep_ids: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {sweep_id: {} for sweep_id in sweep_ids}
    rows = session.execute(
        select(SweepTrial.sweep_id, SweepTrial.state, func.count())
        .where(SweepTrial.sweep_id.in_(sweep_ids))
        .group_by(SweepTrial.sweep_id, SweepTrial.state)
    )
    for sweep_id, state, count in rows:
        out[sweep_id][state] = count
    return out


def jobs(session: Session, job_ids: list[str]) -> list[Job]:
    if not job_ids:
        return []
    return list(session.scalars(select(Job).where(Job.id.in_(job_ids))))


def unfinished_jobs(session: Session, sweep_id: str) -> list[str]:
    return list(
        session.scalars(
            select(Job.id).where(Job.sweep_id == sweep_id, Job.state.not_in(TERMINAL_STATES))
        )
    )


def page(
    session: Session, scope: ProjectScope, *, before_id: str | None, limit: int
) -> list[Sweep]:
    """Newest first; ids are time-ordered, so `before_id` is a stable cursor."""
    stmt = scope.restrict(select(Sweep).order_by(Sweep.id.desc()).limit(limit), Sweep.project)
    if before_id:
        stmt = stmt.where(Sweep.id < before_id)
    return list(session.scalars(stmt))


def events(session: Session, sweep_id: str, after_id: int, limit: int) -> list[SweepEvent]:
    return list(
        session.scalars(
            select(SweepEvent)
            .where(SweepEvent.sweep_id == sweep_id, SweepEvent.id > after_id)
            .order_by(SweepEvent.id)
            .limit(limit)
        )
    )
