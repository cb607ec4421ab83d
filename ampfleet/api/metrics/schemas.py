from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class MetricPoint(BaseModel):
    step: int
    value: float = Field(description="The value; the mean of the bucket when downsampled.")
    min: float | None = Field(None, description="Downsampled only: the bucket's minimum.")
    max: float | None = Field(None, description="Downsampled only: the bucket's maximum.")
    count: int | None = Field(None, description="Downsampled only: points in the bucket.")


class SeriesSummary(BaseModel):
    count: int
    last: float | None
    last_step: int
    min: float
    max: float
    goal: Literal["min", "max"] = Field(description="Which direction is better, by its name.")
    best: float
    best_step: int | None


class MetricSeries(BaseModel):
    name: str
    downsampled: bool
    points: list[MetricPoint]
    summary: SeriesSummary


class MetricsOut(BaseModel):
    job_id: str
    series: list[MetricSeries]
    last_metric_id: int = Field(
        description="The newest metric point this answer covers. To follow the job from "
        "here without receiving these points again, open its event stream with "
        "`Last-Event-ID: <event id>:<last_metric_id>`."
    )
