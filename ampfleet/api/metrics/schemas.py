from __future__ import annotations

from pydantic import BaseModel, Field

from ampfleet.core.metric_goals import MetricDirection


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
    goal: MetricDirection | None = Field(
        description="Which way is better, for an objective: what the job's recipe declares, "
        "else by name (loss, val_loss, val_accuracy, ...); null for a series that is not "
        "an objective (learning_rate, grad_norm, ...)."
    )
    best: float | None = Field(description="The best value, for an objective only.")
    best_step: int | None = Field(description="The first step that reached `best`.")


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
