"""Fair share: each project's policy and the queue order it gives, shared by the scheduler
(which places jobs in that order) and the API (which lists the queue in it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.fleet import JobRequest
from ampfleet.core.models import Project


@dataclass(frozen=True)
class ProjectPolicy:
    weight: float = 1.0
    """Fair-share weight: a project with weight 3 is due three times the usage of weight 1."""
    max_slots: int | None = None
    """Slots the project may hold at once (queued-job limits are checked at submit time)."""
    max_jobs: int | None = None
    """Jobs the project may have placed (scheduled or running) at once."""

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError("fair-share weight must be positive")


def weight(project: str, policies: Mapping[str, ProjectPolicy]) -> float:
    policy = policies.get(project)
    return policy.weight if policy is not None else 1.0


def share(project: str, usage: Mapping[str, float], policies: Mapping[str, ProjectPolicy]) -> float:
    """Usage over weight: the project furthest below its due share comes first."""
    return usage.get(project, 0.0) / weight(project, policies)


def queue_key(
    job: JobRequest, usage: Mapping[str, float], policies: Mapping[str, ProjectPolicy]
) -> tuple[int, float, str]:
    """Sorts jobs into queue order: priority class, then weighted fair share, then FIFO."""
    return -job.priority, share(job.project, usage, policies), job.id


def project_policies(session: Session) -> dict[str, ProjectPolicy]:
    """Every project with a row; the others get `ProjectPolicy()`'s defaults."""
    return {
        p.name: ProjectPolicy(weight=p.weight, max_slots=p.max_slots, max_jobs=p.max_running_jobs)
        for p in session.scalars(select(Project))
    }
