"""Pydantic I/O models of the webhooks resource."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ampfleet.core.project_names import ProjectName
from ampfleet.core.states import JobState
from ampfleet.core.sweep_events import SweepEventType
from ampfleet.core.webhooks import PayloadVersion

PAYLOAD_VERSION_HELP = (
    'What deliveries carry. "standard": the Standard Webhooks envelope {"type", "timestamp", '
    '"data"}, the event in `data`. "flat": the event alone (the form of webhooks made before '
    "the envelope)."
)


SWEEP_EVENTS_HELP = (
    "Sweep events of the project to notify (sweep.trial_started, sweep.trial_completed, "
    "sweep.trial_pruned, sweep.trial_failed, sweep.trial_cancelled, sweep.succeeded, "
    'sweep.failed, sweep.cancelled), or ["*"] for all; none by default.'
)


class Threshold(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="Metric name, e.g. val_loss.")
    op: Literal[">=", ">", "<=", "<"]
    value: float = Field(allow_inf_nan=False, description="A finite number.")


def _final_states() -> list[JobState | Literal["*"]]:
    return [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT]


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1, max_length=2000, description="http(s) endpoint that receives POSTs."
    )
    project: ProjectName | None = Field(None, description="Defaults to the caller's project.")
    states: list[JobState | Literal["*"]] = Field(
        default_factory=_final_states,
        max_length=20,
        description='Job states to notify, or ["*"] for every change.',
    )
    metric_thresholds: list[Threshold] = Field(default_factory=list, max_length=20)
    sweep_events: list[SweepEventType | Literal["*"]] = Field(
        default_factory=list, max_length=20, description=SWEEP_EVENTS_HELP
    )
    payload_version: PayloadVersion = Field("standard", description=PAYLOAD_VERSION_HELP)


class WebhookUpdate(BaseModel):
    """What may change on a webhook: give one or both."""

    model_config = ConfigDict(extra="forbid")

    payload_version: PayloadVersion | None = Field(None, description=PAYLOAD_VERSION_HELP)
    sweep_events: list[SweepEventType | Literal["*"]] | None = Field(
        None, max_length=20, description=SWEEP_EVENTS_HELP
    )

    @field_validator("payload_version", "sweep_events", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("give a value, or leave the field out")
        return value

    @model_validator(mode="after")
    def _something(self) -> WebhookUpdate:
        if self.payload_version is None and self.sweep_events is None:
            raise ValueError("give payload_version or sweep_events")
        return self


class WebhookOut(BaseModel):
    id: str
    project: str
    url: str
    states: list[str]
    metric_thresholds: list[dict[str, Any]]
    sweep_events: list[str]
    payload_version: PayloadVersion
    active: bool
    created_at: datetime


class CreatedWebhook(WebhookOut):
    secret: str = Field(
        description="`whsec_` + base64: verifies `webhook-signature` with any Standard "
        "Webhooks library. Shown this once."
    )


class RotatedSecret(BaseModel):
    secret: str = Field(description="The new `whsec_` secret. Shown this once.")
    previous_secret_until: datetime = Field(
        description="Until then deliveries carry a signature by the previous secret as well."
    )


class WebhookList(BaseModel):
    items: list[WebhookOut]


DeliveryStatus = Literal["pending", "delivered", "failed"]


class DeliveryOut(BaseModel):
    id: int
    message_id: str = Field(description="The `webhook-id` it is sent with, on every attempt.")
    job_id: str = Field(
        description="The job the event is of; a sweep's (`swp_...`) for a sweep event."
    )
    event: str = Field(description="job.state | job.metric | sweep.*")
    event_key: str
    status: str = Field(description="pending | delivered | failed")
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    payload: dict[str, Any] = Field(
        description="The event: the envelope's `data`, or the whole body when flat."
    )


class DeliveryPage(BaseModel):
    items: list[DeliveryOut]
    next_after: int | None
