"""Projects: their scheduling policy (fair-share weight, quotas) and current use."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.api.auth import AdminPrincipal, CurrentPrincipal
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.projects.schemas import ProjectList, ProjectOut, ProjectPolicyIn
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.models import Allocation, Job, Project
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from ampfleet.core.usage import usage_by_project

router = APIRouter(prefix="/v1/projects", tags=["projects"])
ProjectName = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)]


def _out(session: Session, name: str, usage: dict[str, float]) -> ProjectOut:
    project = session.get(Project, name)
    policy = (
        ProjectPolicyIn(
            weight=project.weight,
            max_slots=project.max_slots,
            max_queued_jobs=project.max_queued_jobs,
            max_running_jobs=project.max_running_jobs,
            allow_custom_code=project.allow_custom_code,
        )
        if project
        else ProjectPolicyIn()
    )
    in_use = session.scalar(
        select(func.coalesce(func.sum(Allocation.slots), 0))
        .join(Job, Job.id == Allocation.job_id)
        .where(Job.project == name, Allocation.released_at.is_(None))
    )
    queued = session.scalar(
        select(func.count()).where(Job.project == name, Job.state == JobState.QUEUED)
    )
    return ProjectOut(
        name=name,
        **policy.model_dump(),
        slots_in_use=int(in_use or 0),
        queued_jobs=int(queued or 0),
        usage_gpu_seconds=round(usage.get(name, 0.0), 3),
    )


def _usage(session: Session) -> dict[str, float]:
    return usage_by_project(session, get_settings().fair_share_window_s)


@router.get(
    "",
    response_model=ProjectList,
    responses=responses(401),
    summary="Projects with jobs or a policy (an admin sees all, others their own)",
)
def list_projects(session: SessionDep, principal: CurrentPrincipal) -> ProjectList:
    names = set(session.scalars(select(Project.name))) | set(
        session.scalars(select(Job.project).distinct())
    )
    if not principal.is_admin:
        names = {principal.project}
    usage = _usage(session)
    return ProjectList(items=[_out(session, n, usage) for n in sorted(names)])


@router.get("/{name}", response_model=ProjectOut, responses=responses(401, 404, 422))
def get_project(name: ProjectName, session: SessionDep, principal: CurrentPrincipal) -> ProjectOut:
    principal.check_visible(name, f"project {name}")
    return _out(session, name, _usage(session))


@router.put(
    "/{name}",
    response_model=ProjectOut,
    responses=responses(401, 403, 422),
    summary="Set a project's fair-share weight and quotas (admin)",
)
def put_project(
    name: ProjectName, policy: ProjectPolicyIn, session: SessionDep, _admin: AdminPrincipal
) -> ProjectOut:
    project = session.get(Project, name)
    if project is None:
        project = Project(name=name)
        session.add(project)
    project.weight = policy.weight
    project.max_slots = policy.max_slots
    project.max_queued_jobs = policy.max_queued_jobs
    project.max_running_jobs = policy.max_running_jobs
    project.allow_custom_code = policy.allow_custom_code
    session.flush()
    out = _out(session, name, _usage(session))
    session.commit()
    wake_scheduler()
    return out
