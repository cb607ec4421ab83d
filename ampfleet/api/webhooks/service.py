"""Rules of the webhooks resource: which targets may be subscribed, secrets shown once and
stored sealed, rotation with an overlap, the delivery log. Flushes, never commits.

Creating or deleting a webhook tells core/webhooks.py, which remembers for a moment which
projects have none (a state change should not pay a query to learn it again)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal, ProjectScope
from ampfleet.api.errors import NotFoundError, UnprocessableError
from ampfleet.api.webhooks import repository
from ampfleet.api.webhooks.schemas import (
    CreatedWebhook,
    DeliveryOut,
    DeliveryPage,
    DeliveryStatus,
    RotatedSecret,
    WebhookIn,
    WebhookList,
    WebhookOut,
    WebhookUpdate,
)
from ampfleet.core.ids import new_id
from ampfleet.core.models import Webhook, utcnow
from ampfleet.core.netguard import refuse_reason
from ampfleet.core.sealing import seal
from ampfleet.core.settings import get_settings
from ampfleet.core.webhooks import forget_subscribers, new_secret


def to_out(webhook: Webhook) -> WebhookOut:
    return WebhookOut.model_validate(webhook, from_attributes=True)


def get(
    session: Session, webhook_id: str, principal: Principal, *, for_update: bool = False
) -> Webhook:
    """`for_update` for a change: one racing a DELETE either finds the webhook gone (404) or
    makes the DELETE wait for it, never updating a row that was deleted under it (a 500)."""
    webhook = repository.get(session, webhook_id, for_update=for_update)
    if webhook is None:
        raise NotFoundError(f"webhook {webhook_id} not found")
    principal.check_visible(webhook.project, f"webhook {webhook_id}")
    return webhook


def create(session: Session, body: WebhookIn, principal: Principal) -> CreatedWebhook:
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
        sweep_events=[str(e) for e in body.sweep_events],
        payload_version=body.payload_version,
        active=True,
    )
    session.add(webhook)
    session.flush()
    forget_subscribers(project)
    return CreatedWebhook(**to_out(webhook).model_dump(), secret=secret)


def update(
    session: Session, webhook_id: str, body: WebhookUpdate, principal: Principal
) -> WebhookOut:
    """Deliveries already queued go out in the new form too: the body is made when sent."""
    webhook = get(session, webhook_id, principal, for_update=True)
    principal.check_can_write(webhook.project)
    if body.payload_version is not None:
        webhook.payload_version = body.payload_version
    if body.sweep_events is not None:
        webhook.sweep_events = [str(e) for e in body.sweep_events]
    session.flush()
    return to_out(webhook)


def rotate_secret(session: Session, webhook_id: str, principal: Principal) -> RotatedSecret:
    webhook = get(session, webhook_id, principal, for_update=True)
    principal.check_can_write(webhook.project)
    settings = get_settings()
    secret = new_secret()
    # Sealed to the same row, so the stored value moves over as it is.
    webhook.previous_secret = webhook.secret
    webhook.previous_secret_until = utcnow() + timedelta(seconds=settings.webhook_secret_overlap_s)
    webhook.secret = seal(secret, row_id=webhook.id, secret_key=settings.secret_key)
    session.flush()
    return RotatedSecret(secret=secret, previous_secret_until=webhook.previous_secret_until)


def listing(session: Session, scope: ProjectScope) -> WebhookList:
    return WebhookList(items=[to_out(w) for w in repository.listing(session, scope)])


def delete(session: Session, webhook_id: str, principal: Principal) -> None:
    """Its pending deliveries go with it."""
    webhook = get(session, webhook_id, principal, for_update=True)
    principal.check_can_write(webhook.project)
    session.delete(webhook)
    session.flush()
    forget_subscribers(webhook.project)


def deliveries(
    session: Session,
    webhook_id: str,
    principal: Principal,
    *,
    status: DeliveryStatus | None,
    job_id: str | None,
    after: int,
    limit: int,
) -> DeliveryPage:
    get(session, webhook_id, principal)
    rows = repository.deliveries(
        session, webhook_id, status=status, job_id=job_id, after=after, limit=limit
    )
    return DeliveryPage(
        items=[DeliveryOut.model_validate(r, from_attributes=True) for r in rows],
        next_after=rows[-1].id if len(rows) == limit else None,
    )
