"""A project's idle policy: the API validates it, the node agents apply it (workers/idle.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from ampfleet.core.models import Project


class IdlePolicy(BaseModel):
    """What happens to a running job of the project whose ranks stay idle: the utilisation
    of its busiest rank (GPU utilisation with NVML, else CPU percent of one core) under
    `below_percent` for `window_s` seconds on end."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    below_percent: float = Field(gt=0, le=100, description="Idle below this utilisation.")
    window_s: float = Field(ge=10, le=7 * 86400, description="For this long on end.")
    action: Literal["event", "stop"] = Field(
        "event", description="event: the job is told (an `idle` event); stop: also cancelled."
    )


def of_project(session: Session, project: str) -> IdlePolicy | None:
    row = session.get(Project, project)
    return IdlePolicy.model_validate(row.idle_policy) if row and row.idle_policy else None
