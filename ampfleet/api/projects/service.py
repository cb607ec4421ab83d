"""Rules of the projects resource: a project's scheduling policy (fair-share weight,
quotas, whether it may run bundled code) and its current use. A project exists as soon as
something names it: one nobody configured has the default policy. Flushes, never commits."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal, ProjectScope
from ampfleet.api.goodput import goodput_out
from ampfleet.api.projects import repository
from ampfleet.api.projects.schemas import ProjectList, ProjectOut, ProjectPolicyIn
from ampfleet.core import goodput, idle_policy
from ampfleet.core.goodput import Goodput
from ampfleet.core.models import Project
from ampfleet.core.settings import get_settings
from ampfleet.core.usage import usage_by_project


def _usage(session: Session) -> dict[str, float]:
    return usage_by_project(session, get_settings().fair_share_window_s)


def _spent(session: Session, project: str | None = None) -> dict[str, Goodput]:
    return goodput.by_project(session, get_settings().goodput_window_s, project)


def _describe(
    session: Session, name: str, usage: dict[str, float], spent: dict[str, Goodput]
) -> ProjectOut:
    project = repository.get(session, name)
    policy = (
        ProjectPolicyIn(
            weight=project.weight,
            max_slots=project.max_slots,
            max_queued_jobs=project.max_queued_jobs,
            max_running_jobs=project.max_running_jobs,
            allow_custom_code=project.allow_custom_code,
            idle_policy=idle_policy.of_project(session, name),
        )
        if project
        else ProjectPolicyIn()
    )
    return ProjectOut(
        name=name,
        **policy.model_dump(),
        slots_in_use=repository.slots_in_use(session, name),
        queued_jobs=repository.count_queued(session, name),
        usage_gpu_seconds=round(usage.get(name, 0.0), 3),
        goodput=goodput_out(spent.get(name, Goodput())),
    )


def listing(session: Session, scope: ProjectScope) -> ProjectList:
    """The projects the scope names; every project with jobs or a policy when it names all."""
    names = repository.known_names(session) if scope.projects is None else scope.projects
    usage, spent = _usage(session), _spent(session)  # every project's at once
    return ProjectList(items=[_describe(session, name, usage, spent) for name in sorted(names)])


def get(session: Session, name: str, principal: Principal) -> ProjectOut:
    principal.check_visible(name, f"project {name}")
    return _describe(session, name, _usage(session), _spent(session, name))


def set_policy(session: Session, name: str, policy: ProjectPolicyIn) -> ProjectOut:
    project = repository.get(session, name)
    if project is None:
        project = Project(name=name)
        session.add(project)
    project.weight = policy.weight
    project.max_slots = policy.max_slots
    project.max_queued_jobs = policy.max_queued_jobs
    project.max_running_jobs = policy.max_running_jobs
    project.allow_custom_code = policy.allow_custom_code
    project.idle_policy = policy.idle_policy.model_dump() if policy.idle_policy else None
    session.flush()
    return _describe(session, name, _usage(session), _spent(session, name))
