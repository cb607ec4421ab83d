"""Webhook notifications, queued in the same transaction as the change they report.

A delivery is a Standard Webhooks message: the body is the envelope `{"type", "timestamp",
"data"}` (`type` the event: `job.state`, `job.metric`, or a sweep's `sweep.trial_pruned`,
`sweep.succeeded`...; `timestamp` when it happened, RFC 3339; `data` the event's fields),
or, for a webhook whose `payload_version` is "flat" (every webhook made before the
envelope), the event's fields alone, as those receivers expect.

Deliveries are signed to the Standard Webhooks scheme, so the stock verifier of any language
accepts them: `webhook-id` (`msg_...`, the message's own id, the same on every retry, so a
receiver can drop repeats), `webhook-timestamp` (seconds) and `webhook-signature: v1,<base64
HMAC-SHA256 of "<id>.<timestamp>.<body>">`, keyed with the base64 bytes of a `whsec_` secret.
While a rotated secret's overlap lasts, the header carries one signature per secret,
space-separated, so a receiver holding either verifies.

Secrets made before the standard (64 hex characters) keep working: their HMAC key is the
text itself (as a standard secret: `whsec_` + base64 of that text), and their deliveries also
carry the old `X-Ampfleet-Timestamp` and `X-Ampfleet-Signature` headers until rotated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import operator
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.core.ids import new_id
from ampfleet.core.models import SweepEvent, Webhook, WebhookDelivery, utcnow

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}

PayloadVersion = Literal["standard", "flat"]
"""What a webhook's deliveries carry: the Standard Webhooks envelope, or the event alone."""

SECRET_PREFIX = "whsec_"  # noqa: S105 - the scheme's marker, not a secret
MESSAGE_ID_PREFIX = "msg"
_SECRET_BYTES = 32


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(_SECRET_BYTES)).decode()


def is_legacy_secret(secret: str) -> bool:
    return not secret.startswith(SECRET_PREFIX)


def _hmac_key(secret: str) -> bytes:
    if is_legacy_secret(secret):
        return secret.encode()
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error as exc:
        raise ValueError("a whsec_ secret must be base64") from exc


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_hmac_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def legacy_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The pre-standard `X-Ampfleet-Signature`, sent only for secrets made before it."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"v1={digest.hexdigest()}"


def signed_headers(
    secrets: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The signature headers of one delivery; `secrets` lists the current secret first, then
    a rotated one still within its overlap."""
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, message_id, timestamp, body) for s in secrets),
    }
    legacy = [s for s in secrets if is_legacy_secret(s)]
    if legacy:
        headers["X-Ampfleet-Timestamp"] = str(timestamp)
        headers["X-Ampfleet-Signature"] = legacy_signature(legacy[0], timestamp, body)
    return headers


@dataclass(frozen=True)
class Message:
    """One event as a webhook message: what `body` POSTs and `signed_headers` signs."""

    id: str
    """`msg_...`: the `webhook-id`, the same on every retry."""
    type: str
    """job.state | job.metric | sweep.*"""
    occurred_at: datetime
    data: dict[str, Any]

    def body(self, version: str) -> bytes:
        document = self.data
        if version != "flat":
            # The same instant, in the same RFC 3339 form, as the event's own `time` field.
            document = {
                "type": self.type,
                "timestamp": self.occurred_at.isoformat(),
                "data": self.data,
            }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


# Projects known to have no webhooks, and until when (monotonic): most projects have none,
# and a state change should not pay a query to learn it again. Creating or deleting a
# webhook clears the note in that process; other processes see it within the TTL.
_NONE_UNTIL: dict[str, float] = {}
NO_WEBHOOKS_TTL_S = 1.0


def forget_subscribers(project: str) -> None:
    _NONE_UNTIL.pop(project, None)


def subscribers(session: Session, projects: Iterable[str]) -> dict[str, list[Webhook]]:
    """The active webhooks of each of `projects` that has any, in one query; projects
    noted as having none cost nothing."""
    now = time.monotonic()
    unknown = {project for project in projects if _NONE_UNTIL.get(project, 0.0) <= now}
    if not unknown:
        return {}
    found: dict[str, list[Webhook]] = {}
    for webhook in session.scalars(
        select(Webhook).where(Webhook.project.in_(unknown), Webhook.active).order_by(Webhook.id)
    ):
        found.setdefault(webhook.project, []).append(webhook)
    for project in unknown - found.keys():
        _NONE_UNTIL[project] = now + NO_WEBHOOKS_TTL_S
    return found


def _add(
    session: Session,
    webhook: Webhook,
    job_id: str,
    key: str,
    event: str,
    occurred_at: datetime,
    payload: dict[str, Any],
) -> None:
    """Queue one delivery; a repeat of the same (webhook, job, key) is ignored. A sweep's
    event names the sweep where a job's names the job (`swp_...` beside `job_...`)."""
    try:
        with session.begin_nested():
            session.add(
                WebhookDelivery(
                    webhook_id=webhook.id,
                    message_id=new_id(MESSAGE_ID_PREFIX),
                    job_id=job_id,
                    event_key=key,
                    event=event,
                    payload=payload,
                    status="pending",
                    attempts=0,
                    next_attempt_at=occurred_at,
                    created_at=occurred_at,
                )
            )
    except IntegrityError:
        pass


def state_changed(
    session: Session,
    subscribed: Iterable[Webhook],
    *,
    project: str,
    job_id: str,
    attempt: int,
    from_state: str | None,
    to_state: str,
    reason: str,
    message: str,
) -> None:
    """Queue a `job.state` delivery to each of the project's webhooks (`subscribed`, from
    `subscribers`) that asked for `to_state`."""
    for webhook in subscribed:
        if "*" not in webhook.states and to_state not in webhook.states:
            continue
        now = utcnow()
        payload = {
            "type": "job.state",
            "job_id": job_id,
            "project": project,
            "attempt": attempt,
            "from_state": from_state,
            "to_state": to_state,
            "reason": reason,
            "message": message,
            "time": now.isoformat(),
        }
        key = f"state:{to_state}:{attempt}"
        _add(session, webhook, job_id, key, "job.state", now, payload)


def metrics_landed(
    session: Session, *, project: str, job_id: str, values: Iterable[tuple[str, int, float]]
) -> None:
    """Fire each threshold the first time one of the (name, step, value) points crosses it."""
    webhooks = [w for w in subscribers(session, [project]).get(project, []) if w.metric_thresholds]
    if not webhooks:
        return
    points = list(values)
    for webhook in webhooks:
        for threshold in webhook.metric_thresholds:
            compare = OPERATORS[threshold["op"]]
            for name, step, value in points:
                if name == threshold["name"] and compare(value, threshold["value"]):
                    key = f"metric:{name}{threshold['op']}{threshold['value']}"
                    now = utcnow()
                    payload = {
                        "type": "job.metric",
                        "job_id": job_id,
                        "project": project,
                        "metric": name,
                        "step": step,
                        "value": value,
                        "threshold": threshold,
                        "time": now.isoformat(),
                    }
                    _add(session, webhook, job_id, key, "job.metric", now, payload)
                    break


def sweep_event(
    session: Session, subscribed: Iterable[Webhook], *, project: str, event: SweepEvent
) -> None:
    """Queue a delivery of a sweep's event (core/sweep_events.py) to each of the project's
    webhooks (`subscribed`, from `subscribers`) that asked for its type."""
    for webhook in subscribed:
        wanted = webhook.sweep_events or []
        if "*" not in wanted and event.type not in wanted:
            continue
        payload = {
            "type": event.type,
            "sweep_id": event.sweep_id,
            "project": project,
            "event_id": event.id,
            "trial": event.trial,
            "job_id": event.job_id,
            "message": event.message,
            "details": event.details,
            "time": event.time.isoformat(),
        }
        _add(session, webhook, event.sweep_id, f"sweep:{event.id}", event.type, event.time, payload)
