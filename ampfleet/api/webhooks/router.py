"""Webhook subscriptions of a project and their delivery log."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.api.auth import CurrentPrincipal, Principal
from ampfleet.api.bounds import MAX_ID
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import NotFoundError, UnprocessableError, responses
from ampfleet.core.ids import new_id
from ampfleet.core.models import Webhook, WebhookDelivery, utcnow
from ampfleet.core.netguard import refuse_reason
from ampfleet.core.sealing import seal
from ampfleet.core.settings import get_settings
from ampfleet.core.spec import SafeName
from ampfleet.core.states import JobState
from ampfleet.core.webhooks import forget_subscribers, new_secret

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


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
    project: SafeName | None = Field(None, description="Defaults to the caller's project.")
    states: list[JobState | Literal["*"]] = Field(
        default_factory=_final_states,
        max_length=20,
        description='Job states to notify, or ["*"] for every change.',
    )
    metric_thresholds: list[Threshold] = Field(default_factory=list, max_length=20)


class WebhookOut(BaseModel):
    id: str
    project: str
    url: str
    states: list[str]
    metric_thresholds: list[dict[str, Any]]
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


class DeliveryOut(BaseModel):
    id: int
    job_id: str
    event: str
    event_key: str
    status: str = Field(description="pending | delivered | failed")
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    payload: dict[str, Any]


class DeliveryPage(BaseModel):
    items: list[DeliveryOut]
    next_after: int | None


def _get(session: Session, webhook_id: str, principal: Principal) -> Webhook:
    webhook = session.get(Webhook, webhook_id)
    if webhook is None:
        raise NotFoundError(f"webhook {webhook_id} not found")
    principal.check_visible(webhook.project, f"webhook {webhook_id}")
    return webhook


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=CreatedWebhook,
    responses=responses(401, 403, 422),
    summary="Subscribe a URL to job state changes and metric thresholds",
    description="Deliveries are signed to the Standard Webhooks scheme: `webhook-id` (the "
    "delivery id, the same on every retry), `webhook-timestamp` and `webhook-signature` = "
    "'v1,' + base64(HMAC-SHA256(base64-decoded secret, id + '.' + timestamp + '.' + body)). "
    "Targets on loopback or private networks are refused unless the server allows them.",
)
def create_webhook(
    body: WebhookIn, session: SessionDep, principal: CurrentPrincipal
) -> CreatedWebhook:
    project = body.project or principal.project
    principal.check_can_write(project)
    settings = get_settings()
    refusal = refuse_reason(body.url, allow_private=settings.webhook_allow_private)
    if refusal:
        raise UnprocessableError.for_field("url", refusal)
    webhook_id, secret = new_id("wh"), new_secret()
    webhook = Webhook(
        id=webhook_id,
        project=project,
        url=body.url,
        secret=seal(secret, row_id=webhook_id, secret_key=settings.secret_key),
        states=[str(s) for s in body.states],
        metric_thresholds=[t.model_dump() for t in body.metric_thresholds],
        active=True,
    )
    session.add(webhook)
    session.flush()
    forget_subscribers(project)
    out = WebhookOut.model_validate(webhook, from_attributes=True)
    return CreatedWebhook(**out.model_dump(), secret=secret)


@router.post(
    "/{webhook_id}/rotate-secret",
    response_model=RotatedSecret,
    responses=responses(401, 403, 404),
    summary="Replace the signing secret; the old one keeps signing for an overlap",
    description="Deliveries carry two signatures (new first) until `previous_secret_until` "
    "(AMPFLEET_WEBHOOK_SECRET_OVERLAP_S after the rotation), so receivers can switch to "
    "the new secret at any time within it. Rotating again ends the earlier overlap.",
)
def rotate_webhook_secret(
    webhook_id: str, session: SessionDep, principal: CurrentPrincipal
) -> RotatedSecret:
    webhook = _get(session, webhook_id, principal)
    principal.check_can_write(webhook.project)
    settings = get_settings()
    secret = new_secret()
    # Sealed to the same row, so the stored value moves over as it is.
    webhook.previous_secret = webhook.secret
    webhook.previous_secret_until = utcnow() + timedelta(seconds=settings.webhook_secret_overlap_s)
    webhook.secret = seal(secret, row_id=webhook.id, secret_key=settings.secret_key)
    session.flush()
    return RotatedSecret(secret=secret, previous_secret_until=webhook.previous_secret_until)


@router.get("", response_model=WebhookList, responses=responses(401), summary="List webhooks")
def list_webhooks(session: SessionDep, principal: CurrentPrincipal) -> WebhookList:
    stmt = select(Webhook).order_by(Webhook.id)
    if not principal.is_admin:
        stmt = stmt.where(Webhook.project == principal.project)
    return WebhookList(
        items=[WebhookOut.model_validate(w, from_attributes=True) for w in session.scalars(stmt)]
    )


@router.get("/{webhook_id}", response_model=WebhookOut, responses=responses(401, 404))
def get_webhook(webhook_id: str, session: SessionDep, principal: CurrentPrincipal) -> WebhookOut:
    return WebhookOut.model_validate(_get(session, webhook_id, principal), from_attributes=True)


@router.delete(
    "/{webhook_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(401, 403, 404),
    summary="Delete a webhook (its pending deliveries go with it)",
)
def delete_webhook(webhook_id: str, session: SessionDep, principal: CurrentPrincipal) -> Response:
    webhook = _get(session, webhook_id, principal)
    principal.check_can_write(webhook.project)
    session.delete(webhook)
    forget_subscribers(webhook.project)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryPage,
    responses=responses(401, 404, 422),
    summary="The delivery log: every notification, its attempts and outcome",
)
def deliveries(
    webhook_id: str,
    session: SessionDep,
    principal: CurrentPrincipal,
    status_filter: Annotated[
        Literal["pending", "delivered", "failed"] | None, Query(alias="status")
    ] = None,
    job_id: Annotated[str | None, Query(max_length=40)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeliveryPage:
    _get(session, webhook_id, principal)
    stmt = (
        select(WebhookDelivery)
        .where(WebhookDelivery.webhook_id == webhook_id, WebhookDelivery.id > after)
        .order_by(WebhookDelivery.id)
        .limit(limit)
    )
    if status_filter:
        stmt = stmt.where(WebhookDelivery.status == status_filter)
    if job_id:
        stmt = stmt.where(WebhookDelivery.job_id == job_id)
    rows = session.scalars(stmt).all()
    return DeliveryPage(
        items=[DeliveryOut.model_validate(r, from_attributes=True) for r in rows],
        next_after=rows[-1].id if len(rows) == limit else None,
    )
