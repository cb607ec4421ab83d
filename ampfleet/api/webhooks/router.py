"""HTTP of the webhooks resource; rules live in service.py, queries in repository.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from ampfleet.api.auth import CurrentPrincipal, ListingScope
from ampfleet.api.bounds import MAX_ID
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.webhooks import service
from ampfleet.api.webhooks.schemas import (
    CreatedWebhook,
    DeliveryPage,
    DeliveryStatus,
    RotatedSecret,
    WebhookIn,
    WebhookList,
    WebhookOut,
    WebhookUpdate,
)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=CreatedWebhook,
    responses=responses(401, 403, 422),
    summary="Subscribe a URL to job state changes and metric thresholds",
    description="Deliveries are Standard Webhooks messages: the body "
    '{"type", "timestamp", "data"} (or the event alone with `payload_version` "flat"), '
    "`webhook-id` (`msg_...`, the same on every retry), `webhook-timestamp` and "
    "`webhook-signature` = 'v1,' + base64(HMAC-SHA256(base64-decoded secret, id + '.' + "
    "timestamp + '.' + body)). Targets on loopback or private networks are refused unless "
    "the server allows them.",
)
def create_webhook(
    body: WebhookIn, session: SessionDep, principal: CurrentPrincipal
) -> CreatedWebhook:
    return service.create(session, body, principal)


@router.patch(
    "/{webhook_id}",
    response_model=WebhookOut,
    responses=responses(401, 403, 404, 422),
    summary="Switch a webhook's payload version, or the sweep events it gets",
    description='A receiver that parses the envelope moves its webhook from "flat" to '
    '"standard" here, keeping its id and secret; deliveries still queued go out in the new '
    "form. `sweep_events` replaces the sweep events it is notified of.",
)
def update_webhook(
    webhook_id: str, body: WebhookUpdate, session: SessionDep, principal: CurrentPrincipal
) -> WebhookOut:
    return service.update(session, webhook_id, body, principal)


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
    return service.rotate_secret(session, webhook_id, principal)


@router.get("", response_model=WebhookList, responses=responses(401), summary="List webhooks")
def list_webhooks(
    session: SessionDep,
    scope: ListingScope,
) -> WebhookList:
    return service.listing(session, scope)


@router.get("/{webhook_id}", response_model=WebhookOut, responses=responses(401, 404))
def get_webhook(webhook_id: str, session: SessionDep, principal: CurrentPrincipal) -> WebhookOut:
    return service.to_out(service.get(session, webhook_id, principal))


@router.delete(
    "/{webhook_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(401, 403, 404),
    summary="Delete a webhook (its pending deliveries go with it)",
)
def delete_webhook(webhook_id: str, session: SessionDep, principal: CurrentPrincipal) -> Response:
    service.delete(session, webhook_id, principal)
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
    status_filter: Annotated[DeliveryStatus | None, Query(alias="status")] = None,
    job_id: Annotated[
        str | None,
        Query(max_length=40, description="A job's deliveries, or a sweep's (`swp_...`)."),
    ] = None,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeliveryPage:
    return service.deliveries(
        session,
        webhook_id,
        principal,
        status=status_filter,
        job_id=job_id,
        after=after,
        limit=limit,
    )
