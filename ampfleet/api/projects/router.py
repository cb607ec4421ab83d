"""HTTP of the projects resource; rules live in service.py, queries in repository.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from ampfleet.api.auth import AdminPrincipal, CurrentPrincipal, ListingScope
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.projects import service
from ampfleet.api.projects.schemas import ProjectList, ProjectOut, ProjectPolicyIn
from ampfleet.core.db import after_commit
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.project_names import ProjectName

router = APIRouter(prefix="/v1/projects", tags=["projects"])
ProjectPath = Annotated[ProjectName, Path()]


@router.get(
    "",
    response_model=ProjectList,
    responses=responses(401),
    summary="Projects with jobs or a policy (an admin sees all, others their own; "
    "`project` names one)",
)
def list_projects(
    session: SessionDep,
    scope: ListingScope,
) -> ProjectList:
    return service.listing(session, scope)


@router.get("/{name}", response_model=ProjectOut, responses=responses(401, 404, 422))
def get_project(name: ProjectPath, session: SessionDep, principal: CurrentPrincipal) -> ProjectOut:
    return service.get(session, name, principal)


@router.put(
    "/{name}",
    response_model=ProjectOut,
    responses=responses(401, 403, 422),
    summary="Set a project's fair-share weight and quotas (admin)",
)
def put_project(
    name: ProjectPath, policy: ProjectPolicyIn, session: SessionDep, _admin: AdminPrincipal
) -> ProjectOut:
    out = service.set_policy(session, name, policy)
    after_commit(session, wake_scheduler)  # a new quota or weight may let a job start
    return out
