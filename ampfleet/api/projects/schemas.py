"""Pydantic I/O models of the projects resource."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ampfleet.api.bounds import MAX_INT
from ampfleet.api.goodput import GoodputOut


class IdlePolicy(BaseModel):
    """What happens to a running job of the project whose ranks stay idle: the utilisation
    of its busiest rank (GPU utilisation with NVML, else CPU percent of one core) under
    `below_percent` for `window_s` seconds on end."""

    model_config = ConfigDict(extra="forbid")

    below_percent: float = Field(gt=0, le=100, description="Idle below this utilisation.")
    window_s: float = Field(ge=10, le=7 * 86400, description="For this long on end.")
    action: Literal["event", "stop"] = Field(
        "event", description="event: the job is told (an `idle` event); stop: also cancelled."
    )


class ProjectPolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: float = Field(1.0, gt=0, le=1000, description="Fair-share weight.")
    max_slots: int | None = Field(
        None, ge=0, le=MAX_INT, description="Concurrent GPUs/slots; null: no cap."
    )
    max_queued_jobs: int | None = Field(
        None, ge=0, le=MAX_INT, description="Queued jobs; beyond it submit gets 429."
    )
    max_running_jobs: int | None = Field(
        None, ge=0, le=MAX_INT, description="Jobs placed (scheduled or running) at once."
    )
    allow_custom_code: bool | None = Field(
        None,
        description="Its write keys may upload and run code bundles; null: the default, "
        "allowed in project 'default' only.",
    )
    idle_policy: IdlePolicy | None = Field(None, description="null: idle jobs run on.")


class ProjectOut(ProjectPolicyIn):
    name: str
    slots_in_use: int
    queued_jobs: int
    usage_gpu_seconds: float = Field(description="In the fair-share window.")
    goodput: GoodputOut = Field(
        description="Of its jobs submitted within AMPFLEET_GOODPUT_WINDOW_S (7 days)."
    )


class ProjectList(BaseModel):
    items: list[ProjectOut]
