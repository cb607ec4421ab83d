"""Sends queued webhook deliveries: claimed with a conditional UPDATE (so two scheduler
processes never send the same one at once), retried with exponential backoff, every
attempt's outcome kept on the delivery row, which is the delivery log."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import or_, select, update

from ampfleet.core.db import session_scope
from ampfleet.core.models import Webhook, WebhookDelivery, utcnow
from ampfleet.core.netguard import RefusedTargetError, Resolver, pin, system_resolver
from ampfleet.core.sealing import UnsealError, unseal
from ampfleet.core.settings import Settings
from ampfleet.core.webhooks import Message, signed_headers

log = logging.getLogger(__name__)
CLAIM_FOR = timedelta(seconds=60)
MAX_BACKOFF_S = 3600.0


@dataclass(frozen=True)
class Claimed:
    id: int
    url: str
    secret: str | None
    """None when the stored secret cannot be opened with this server's key."""
    message: Message
    payload_version: str
    attempts: int
    previous_secret: str | None = None
    """A rotated secret still within its overlap: it signs too."""


def claim(limit: int, secret_key: str) -> list[Claimed]:
    now = utcnow()
    with session_scope() as session:
        due = (
            select(WebhookDelivery.id)
            .where(
                WebhookDelivery.status == "pending",
                WebhookDelivery.next_attempt_at <= now,
                or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
            )
            .order_by(WebhookDelivery.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        ids = session.scalars(
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_(due.scalar_subquery()))
            .values(claimed_until=now + CLAIM_FOR)
            .returning(WebhookDelivery.id)
        ).all()
        if not ids:
            return []
        rows = session.execute(
            select(WebhookDelivery, Webhook)
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .where(WebhookDelivery.id.in_(ids))
            .order_by(WebhookDelivery.id)
        ).all()
        return [
            Claimed(
                d.id,
                hook.url,
                _opened(hook.secret, hook.id, secret_key),
                Message(d.message_id, d.event, d.created_at, d.payload),
                hook.payload_version,
                d.attempts,
                previous_secret=_opened(hook.previous_secret, hook.id, secret_key)
                if hook.previous_secret_until is not None and hook.previous_secret_until > now
                else None,
            )
            for d, hook in rows
        ]


def _opened(sealed: str | None, webhook_id: str, secret_key: str) -> str | None:
    if sealed is None:
        return None
    try:
        return unseal(sealed, row_id=webhook_id, secret_key=secret_key)
    except UnsealError:
        return None


def send(
    client: httpx.Client,
    delivery: Claimed,
    settings: Settings,
    resolve: Resolver = system_resolver,
) -> tuple[int | None, str | None]:
    """(status code, error); a 2xx code and no error means delivered."""
    if delivery.secret is None:
        return None, "the webhook's secret cannot be opened: AMPFLEET_SECRET_KEY has changed"
    try:
        # Checked again here (DNS may have changed since the webhook was created), and the
        # request goes to the address just checked, not to a second lookup's answer.
        target = pin(delivery.url, allow_private=settings.webhook_allow_private, resolve=resolve)
    except RefusedTargetError as exc:
        return None, str(exc)
    message = delivery.message
    body = message.body(delivery.payload_version)
    secrets = [delivery.secret]
    if delivery.previous_secret is not None:
        secrets.append(delivery.previous_secret)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ampfleet-webhooks",
        "X-Ampfleet-Event": message.type,
        "X-Ampfleet-Delivery": str(delivery.id),
        "Host": target.host_header,
        **signed_headers(secrets, message.id, int(time.time()), body),
    }
    extensions = {"sni_hostname": target.server_name} if target.server_name else None
    try:
        response = client.post(target.url, content=body, headers=headers, extensions=extensions)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        # Any failure is this delivery's own: it is recorded and retried, never left to
        # stall the batch it was claimed with.
        return None, f"{type(exc).__name__}: {exc}"
    if 200 <= response.status_code < 300:
        return response.status_code, None
    return response.status_code, f"HTTP {response.status_code}"


def record(delivery: Claimed, code: int | None, error: str | None, settings: Settings) -> None:
    now = utcnow()
    attempts = delivery.attempts + 1
    values: dict[str, Any] = {
        "attempts": attempts,
        "last_status_code": code,
        "last_error": error,
        "claimed_until": None,
    }
    if error is None:
        values |= {"status": "delivered", "delivered_at": now}
    elif attempts >= settings.webhook_max_attempts:
        values |= {"status": "failed"}
    else:
        delay = min(settings.webhook_retry_base_s * 2 ** (attempts - 1), MAX_BACKOFF_S)
        values |= {"next_attempt_at": now + timedelta(seconds=delay)}
    with session_scope() as session:
        session.execute(
            update(WebhookDelivery).where(WebhookDelivery.id == delivery.id).values(**values)
        )


def deliver_due(
    settings: Settings,
    client: httpx.Client,
    limit: int = 20,
    resolve: Resolver = system_resolver,
) -> int:
    deliveries = claim(limit, settings.secret_key)
    for delivery in deliveries:
        code, error = send(client, delivery, settings, resolve)
        record(delivery, code, error, settings)
        if error:
            log.info("webhook delivery %s failed: %s", delivery.id, error)
    return len(deliveries)


class WebhookDispatcher:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(
            timeout=self.settings.webhook_timeout_s, follow_redirects=False
        ) as client:
            while not self._stop.is_set():
                try:
                    sent = deliver_due(self.settings, client)
                except Exception:
                    log.exception("webhook dispatch failed; retrying")
                    sent = 0
                if not sent:
                    self._stop.wait(self.settings.webhook_poll_s)
