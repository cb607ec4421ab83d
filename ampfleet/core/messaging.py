"""The Celery app of the server processes, the transactional outbox and the scheduler's wake-up.

Messages only carry commands that name rows ("start attempt 3 of job J"); the database
holds the truth. A decision and its message are written in one transaction (the outbox)
and sent after commit, so a crash between the two delays a message but never loses it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from celery import Celery
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core.backends import backend_queue_prefix
from ampfleet.core.celery_config import WAKE_SCHEDULER_QUEUE, make_celery
from ampfleet.core.models import OutboxMessage, utcnow
from ampfleet.core.settings import get_settings

log = logging.getLogger(__name__)


@lru_cache
def get_celery() -> Celery:
    return make_celery(get_settings())


def enqueue(session: Session, *, queue: str, task: str, **kwargs: Any) -> OutboxMessage:
    """Write a message to the outbox in the caller's transaction; `relay_outbox` sends it."""
    message = OutboxMessage(queue=queue, task=task, kwargs=kwargs)
    session.add(message)
    return message


def relay_outbox(session: Session, limit: int = 500) -> int:
    """Send committed outbox messages in id order, marking each sent; returns how many.
    Messages to a compute backend's queue are its own to relay (core/backends.py)."""
    pending = session.scalars(
        select(OutboxMessage)
        .where(
            OutboxMessage.sent_at.is_(None),
            ~OutboxMessage.queue.startswith(backend_queue_prefix()),  # the backends relay them
        )
        .order_by(OutboxMessage.id)
        .limit(limit)
    ).all()
    sent = 0
    for message in pending:
        try:
            get_celery().send_task(message.task, kwargs=message.kwargs, queue=message.queue)
        except Exception:  # the broker is down: leave it for the next relay pass
            log.warning("outbox: broker refused message %s; will retry", message.id, exc_info=True)
            session.execute(
                update(OutboxMessage)
                .where(OutboxMessage.id == message.id)
                .values(send_attempts=OutboxMessage.send_attempts + 1)
            )
            break
        session.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id == message.id, OutboxMessage.sent_at.is_(None))
            .values(sent_at=utcnow(), send_attempts=OutboxMessage.send_attempts + 1)
        )
        sent += 1
    return sent


def broker_reachable(timeout_s: float = 2.0) -> str | None:
    """None when the broker accepts a connection, else what went wrong."""
    try:
        with get_celery().connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout_s)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


_waker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wake-scheduler")
_wake_pending = threading.Event()


def wake_scheduler() -> None:
    """Best effort and off the caller's thread: the scheduler also polls the database, so a
    lost wake-up costs one poll interval, and a broker that is down must not slow a request.
    Wake-ups asked for while one is still waiting to be sent ride along with it.

    A wake-up is a plain message, not a Celery task: the scheduler only takes it off its
    queue, no Celery worker runs it or reports on it, so as a task it would stand in Flower
    as sent and never finished (PENDING) for ever."""
    if _wake_pending.is_set():
        return
    _wake_pending.set()
    _waker.submit(_send_wake)


def flush_wake_ups(timeout_s: float = 10.0) -> None:
    """Wait until every wake-up asked for so far has been sent (or given up on): before the
    process's configuration changes under it (the tests' `environment`), so that a wake-up
    asked for under one broker is not sent to, or lost on, another."""
    with contextlib.suppress(TimeoutError):
        _waker.submit(lambda: None).result(timeout=timeout_s)


WAKE_GAP_S = 0.05
"""At most one wake-up per 50 ms: under a burst of submits one placement pass serves many
(the scheduler reads every pending job), so a message per request only costs the API
process a broker round trip each."""
_last_wake = [0.0]


def _send_wake() -> None:
    time.sleep(max(0.0, _last_wake[0] + WAKE_GAP_S - time.monotonic()))  # the others ride along
    _wake_pending.clear()  # later wake-ups need a message of their own: this one is leaving
    _last_wake[0] = time.monotonic()
    try:
        with get_celery().producer_or_acquire() as producer:
            producer.publish(
                {},
                exchange=WAKE_SCHEDULER_QUEUE.exchange,
                routing_key=WAKE_SCHEDULER_QUEUE.routing_key,
                declare=[WAKE_SCHEDULER_QUEUE],
                serializer="json",
                retry=False,
            )
    except Exception:
        log.warning("could not wake the scheduler; it will find the work on its next poll")
