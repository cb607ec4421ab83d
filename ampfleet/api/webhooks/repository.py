"""Every query of the webhooks resource."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.api.auth import ProjectScope
from ampfleet.core.models import Webhook, WebhookDelivery


def get(session: Session, webhook_id: str, *, for_update: bool = False) -> Webhook | None:
    """`for_update`: the row locked until the transaction ends (PostgreSQL; SQLite's writers
    are serialised already), so a change to it cannot meet a concurrent delete half way."""
    return session.get(
        Webhook, webhook_id, with_for_update=for_update, populate_existing=for_update
    )


def listing(session: Session, scope: ProjectScope) -> list[Webhook]:
    statement = select(Webhook).order_by(Webhook.id)
    return list(session.scalars(scope.restrict(statement, Webhook.project)))


def deliveries(
    session: Session,
    webhook_id: str,
    *,
    status: str | None,
    job_id: str | None,
    after: int,
    limit: int,
) -> list[WebhookDelivery]:
    """Oldest first, from the id after `after`."""
    statement = (
        select(WebhookDelivery)
        .where(WebhookDelivery.webhook_id == webhook_id, WebhookDelivery.id > after)
        .order_by(WebhookDelivery.id)
        .limit(limit)
    )
    if status:
        statement = statement.where(WebhookDelivery.status == status)
    if job_id:
        statement = statement.where(WebhookDelivery.job_id == job_id)
    return list(session.scalars(statement))
