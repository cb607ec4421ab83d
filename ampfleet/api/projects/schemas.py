"""Pydantic I/O models of the projects resource."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ampfleet.api.bounds import MAX_INT
from ampfleet.api.goodput import GoodputOut
from ampfleet.core.idle_policy import IdlePolicy


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
