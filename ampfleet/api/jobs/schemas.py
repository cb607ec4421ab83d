"""Pydantic I/O models of the jobs resource."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from ampfleet.core.spec import Precision, Priority
from ampfleet.core.states import JobState


class Progress(BaseModel):
    step: int = Field(description="Optimizer steps completed.")
    total_steps: int | None = Field(description="Known once the run has started.")
    fraction: float | None
    eta_seconds: float | None = Field(description="From the pace since the run started.")


class PrecisionSetting(BaseModel):
    requested: Precision
    effective: str | None = Field(description="What the run actually uses, once it started.")


class JobOut(BaseModel):
    id: str
    name: str | None
    project: str
    recipe: str
    state: JobState
    attempt: int = Field(description="Placements so far; a restart increments it.")
    priority: Priority
    progress: Progress
    latest_metrics: dict[str, float]
    precision: PrecisionSetting
    allreduce_dtype: PrecisionSetting
    failure_reason: str | None
    labels: dict[str, str]
    spec: dict[str, Any] = Field(description="The spec with every default resolved.")
    created_at: datetime
    updated_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


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


class MetricPoint(BaseModel):
    step: int
    value: float
    time: datetime


class MetricSeries(BaseModel):
    name: str
    points: list[MetricPoint]


class MetricsOut(BaseModel):
    job_id: str
    series: list[MetricSeries]
