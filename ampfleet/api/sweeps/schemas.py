"""Pydantic I/O models of the sweeps resource."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from ampfleet.core.sweep_spec import SweepState, TrialState


class TrialOut(BaseModel):
    number: int
    job_id: str | None = Field(description="The job it runs as; null: it was never admitted.")
    state: TrialState
    params: dict[str, Any]
    values: list[float] | None = Field(description="One per objective, once complete.")
    reason: str | None = Field(description="Why it was pruned, failed or cancelled.")
    measures: dict[str, Any] = Field(
        description="What the platform measured: samples_per_s (mean), slot_s, the effective "
        "precision and allreduce dtype, steps."
    )
    intermediate: dict[str, float] = Field(
        description="The pruner's metric by step, as told to the pruner."
    )
    created_at: datetime
    finished_at: datetime | None


class PrecisionRow(BaseModel):
    precision: str
    trials: int = Field(description="Complete trials that ran in this precision.")
    best_trial: int | None = Field(description="The best of them by the first objective.")
    value: float | None = Field(description="Its first objective's value.")
    samples_per_s: float | None = Field(description="Its measured throughput.")
    slot_s: float | None


class SweepOut(BaseModel):
    id: str
    name: str | None
    project: str
    state: SweepState
    reason: str | None
    spec: dict[str, Any]
    counts: dict[str, int] = Field(description="Trials by state.")
    best_trial: TrialOut | None = Field(
        description="Single objective: the best complete trial (its model downloads as any "
        "job's, from its job)."
    )
    pareto_front: list[TrialOut] = Field(
        description="The complete trials no other complete trial beats on every objective."
    )
    precision_report: list[PrecisionRow] = Field(
        description="Per precision tried: the best trial, its quality and its speed."
    )
    slot_s: dict[str, float] = Field(
        description="Slot-seconds its trials held: total, and of those pruned."
    )
    trials: list[TrialOut]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class SweepSummary(BaseModel):
    id: str
    name: str | None
    project: str
    state: SweepState
    reason: str | None
    counts: dict[str, int]
    created_at: datetime
    finished_at: datetime | None


class SweepPage(BaseModel):
    items: list[SweepSummary]
    next_cursor: str | None
