"""Every query of code bundles."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.job_creation import bundle_recipe
from ampfleet.core.models import Bundle, Job, Sweep
from ampfleet.core.states import TERMINAL_STATES
from ampfleet.core.sweep_spec import SweepState


def unfinished_jobs_of(session: Session, bundle: Bundle, limit: int = 5) -> list[str]:
    return list(
        session.scalars(
            select(Job.id)
            .where(
                Job.project == bundle.project,
                Job.recipe == bundle_recipe(bundle.id),
                Job.state.not_in([state.value for state in TERMINAL_STATES]),
            )
            .order_by(Job.id)
            .limit(limit)
        )
    )


def by_content(session: Session, project: str, sha256: str) -> Bundle | None:
    return session.scalars(
        select(Bundle).where(Bundle.project == project, Bundle.sha256 == sha256)
    ).one_or_none()


def listed(session: Session, project: str | None, limit: int) -> list[Bundle]:
    stmt = select(Bundle).order_by(Bundle.id.desc()).limit(limit)
    if project is not None:
        stmt = stmt.where(Bundle.project == project)
    return list(session.scalars(stmt))


def running_sweeps_of(session: Session, bundle: Bundle) -> list[str]:
    """Running sweeps of its project whose trials run it (each new trial fetches it)."""
    sweeps = session.execute(
        select(Sweep.id, Sweep.spec).where(
            Sweep.project == bundle.project, Sweep.state == SweepState.RUNNING.value
        )
    )
    return [
        sweep_id
        for sweep_id, spec in sweeps
        if ((spec.get("base") or {}).get("code") or {}).get("bundle") == bundle.id
    ]
