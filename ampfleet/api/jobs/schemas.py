"""Pydantic I/O models of the jobs resource."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ampfleet.api.goodput import GoodputOut
from ampfleet.core.spec import Precision, Priority
from ampfleet.core.states import JobState


class Progress(BaseModel):
    step: int = Field(description="Optimizer steps completed.")
    total_steps: int | None = Field(
        description="Known once the run has started; null for a runtime-only job."
    )
    fraction: float | None
    eta_seconds: float | None = Field(
        description="While it runs: from its pace over its latest reports (its start-up "
        "left out); a runtime-only job, what is left of its time."
    )
    eta_confidence: Literal["low", "medium", "high"] | None = Field(
        None,
        description="How far to trust the ETA: high once many reports over 20 s or more "
        "ran at a steady pace, low from one or two.",
    )
    steps_per_s: float | None = Field(None, description="The pace the ETA is computed from.")


class PrecisionSetting(BaseModel):
    requested: Precision
    effective: str | None = Field(description="What the run actually uses, once it started.")


class QueueInfo(BaseModel):
    """Why a queued job is not running, as the scheduler saw it on its last pass."""

    position: int | None = Field(description="1-based place in the queue order.")
    pending_reason: str | None
    estimated_start_at: datetime | None = Field(
        description="From running jobs' progress; null when it cannot be estimated."
    )
    not_before: datetime | None = Field(description="Restart backoff: not placed before.")


class Volume(BaseModel):
    """What the job produced against its limits; past them more is dropped and counted."""

    metric_points: int
    metric_points_dropped: int
    log_bytes: int
    log_lines_dropped: int
    records_rejected: int = Field(
        description="Records of the job's ranks that the node agent rejected (events say why)."
    )


class JobOut(BaseModel):
    id: str
    name: str | None
    project: str
    recipe: str
    state: JobState
    attempt: int = Field(description="Placements so far; a restart increments it.")
    priority: Priority
    gang_size: int = Field(description="Ranks the job runs (all placed together).")
    progress: Progress
    queue: QueueInfo | None = Field(description="Present while the job waits in the queue.")
    latest_metrics: dict[str, float]
    volume: Volume
    precision: PrecisionSetting
    allreduce_dtype: PrecisionSetting
    failure_reason: str | None
    labels: dict[str, str]
    sweep_id: str | None = Field(None, description="The sweep it is a trial of; null: a job.")
    trial: int | None = Field(None, description="Its trial number in that sweep.")
    spec: dict[str, Any] = Field(description="The spec with every default resolved.")
    created_at: datetime
    updated_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    goodput: GoodputOut | None = Field(
        None, description="Where its slot-seconds went; on a single job's GET, null in lists."
    )


class JobPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priority: Priority = Field(description="New priority class; applies from the next pass.")


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page.")


class EventOut(BaseModel):
    id: int
    job_id: str
    attempt: int
    time: datetime
    kind: str = Field(description="`transition` for state changes, `info` otherwise.")
    from_state: JobState | None
    to_state: JobState | None
    reason: str
    message: str


class EventList(BaseModel):
    items: list[EventOut]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null when this page was not full."
    )


class CheckpointExport(BaseModel):
    """What to export a checkpoint as; anything left out is the job's own."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="The exported model's dtype (`export.dtype`); none: the job's."
    )
