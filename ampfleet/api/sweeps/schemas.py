"""Pydantic I/O models of the sweeps resource."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from ampfleet.core.sweep_events import SweepEventType
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
        "precision and allreduce dtype, steps; final: measured after its job ended (a pruned "
        "trial's job stops after the trial ended: until then its slot_s is read live)."
    )
    intermediate: dict[str, float] = Field(
        description="The pruner's metric by step, as told to the pruner."
    )
    created_at: datetime
    finished_at: datetime | None


class LastReported(BaseModel):
    step: int
    value: float


class PrecisionRow(BaseModel):
    """One precision tried, and one trial of it: the one with the best configuration (the
    best trial's parameters but for precision) where such a trial ran, else the best complete
    trial in this precision, else the one that went furthest."""

    precision: str = Field(description="As the trial asked for it, else as measured.")
    trials: int = Field(description="Trials in this precision, whatever became of them.")
    complete: int = Field(description="Of those, the complete ones.")
    best_trial: int | None = Field(
        description="The best complete trial in this precision by the first objective."
    )
    trial: int = Field(description="The trial this row's figures are of.")
    same_configuration: bool = Field(
        description="Whether `trial` has the best configuration (else it is this precision's "
        "best or furthest trial)."
    )
    state: TrialState = Field(description="The state of `trial`.")
    reason: str | None = Field(description="Why `trial` was pruned, failed or cancelled.")
    value: float | None = Field(description="Its first objective's value, once complete.")
    last_reported: LastReported | None = Field(
        description="The pruner's metric at the last step told: how far a trial that did not "
        "complete got."
    )
    samples_per_s: float | None = Field(description="Its measured throughput (mean).")
    slot_s: float | None = Field(description="Slot-seconds its job held.")
    steps: int | None = Field(description="Steps it ran.")


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
        description="Per precision tried, pruned or failed ones too: for the best "
        "configuration, the measured quality and speed (or why there is none)."
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


class SweepEventOut(BaseModel):
    id: int = Field(description="Increasing; `after` and the stream's `Last-Event-ID`.")
    type: SweepEventType = Field(
        description="sweep.trial_started | trial_completed | trial_pruned | trial_failed | "
        "trial_cancelled, or the sweep's end: sweep.succeeded | failed | cancelled. The same "
        "`type` as its webhook message."
    )
    time: datetime
    trial: int | None = Field(description="The trial's number; null for the sweep's end.")
    job_id: str | None = Field(description="The trial's job, where it has one.")
    message: str
    details: dict[str, Any] = Field(
        description="A trial's: state, params, values, reason. The sweep's end: state, "
        "reason, counts (trials by state)."
    )


class SweepEventList(BaseModel):
    items: list[SweepEventOut]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null when this page was not full."
    )
