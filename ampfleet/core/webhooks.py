"""Webhook notifications, queued in the same transaction as the change they report.

Payloads are signed with HMAC-SHA256 over "<timestamp>.<body>" (header
`X-Ampfleet-Signature: v1=<hex>`, timestamp in `X-Ampfleet-Timestamp`), so a receiver can
check both origin and freshness.
"""

from __future__ import annotations

import hashlib
import hmac
import operator
import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.core.models import Webhook, WebhookDelivery, utcnow

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"v1={digest.hexdigest()}"


# Projects known to have no webhooks, and until when (monotonic): most projects have none,
# and a state change should not pay a query to learn it again. Creating or deleting a
# webhook clears the note in that process; other processes see it within the TTL.
_NONE_UNTIL: dict[str, float] = {}
NO_WEBHOOKS_TTL_S = 1.0


def forget_subscribers(project: str) -> None:
    _NONE_UNTIL.pop(project, None)


def _subscribers(session: Session, project: str) -> list[Webhook]:
    if _NONE_UNTIL.get(project, 0.0) > time.monotonic():
        return []
    found = list(session.scalars(select(Webhook).where(Webhook.project == project, Webhook.active)))
    if not found:
        _NONE_UNTIL[project] = time.monotonic() + NO_WEBHOOKS_TTL_S
    return found


def _add(
    session: Session, webhook: Webhook, job_id: str, key: str, event: str, payload: dict[str, Any]
) -> None:
    """Queue one delivery; a repeat of the same (webhook, job, key) is ignored."""
    try:
        with session.begin_nested():
            session.add(
                WebhookDelivery(
                    webhook_id=webhook.id,
                    job_id=job_id,
                    event_key=key,
                    event=event,
                    payload=payload,
                    status="pending",
                    attempts=0,
                    next_attempt_at=utcnow(),
                )
            )
    except IntegrityError:
        pass


def state_changed(
    session: Session,
    *,
    project: str,
    job_id: str,
    attempt: int,
    from_state: str | None,
    to_state: str,
    reason: str,
    message: str,
) -> None:
    for webhook in _subscribers(session, project):
        if "*" not in webhook.states and to_state not in webhook.states:
            continue
        payload = {
            "type": "job.state",
            "job_id": job_id,
            "project": project,
            "attempt": attempt,
            "from_state": from_state,
            "to_state": to_state,
            "reason": reason,
            "message": message,
            "time": utcnow().isoformat(),
        }
        _add(session, webhook, job_id, f"state:{to_state}:{attempt}", "job.state", payload)


def metrics_landed(
    session: Session, *, project: str, job_id: str, values: Iterable[tuple[str, int, float]]
) -> None:
    """Fire each threshold the first time one of the (name, step, value) points crosses it."""
    webhooks = [w for w in _subscribers(session, project) if w.metric_thresholds]
    if not webhooks:
        return
    points = list(values)
    for webhook in webhooks:
        for threshold in webhook.metric_thresholds:
            compare = OPERATORS[threshold["op"]]
            for name, step, value in points:
                if name == threshold["name"] and compare(value, threshold["value"]):
                    key = f"metric:{name}{threshold['op']}{threshold['value']}"
                    payload = {
                        "type": "job.metric",
                        "job_id": job_id,
                        "project": project,
                        "metric": name,
                        "step": step,
                        "value": value,
                        "threshold": threshold,
                        "time": utcnow().isoformat(),
                    }
                    _add(session, webhook, job_id, key, "job.metric", payload)
                    break
