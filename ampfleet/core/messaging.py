"""The Celery app every process shares, the task names and the transactional outbox.

Messages only carry commands that name rows ("start attempt 3 of job J"); the database
holds the truth. A decision and its message are written in one transaction (the outbox)
and sent after commit, so a crash between the two delays a message but never loses it.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from celery import Celery
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core import file_broker
from ampfleet.core.models import OutboxMessage, utcnow
from ampfleet.core.settings import SCHEDULER_QUEUE, Settings, get_settings

log = logging.getLogger(__name__)

START_ATTEMPT = "ampfleet.start_attempt"
WAKE_SCHEDULER = "ampfleet.wake_scheduler"


def make_celery(settings: Settings) -> Celery:
    app = Celery("ampfleet", broker=settings.effective_broker_url)
    options: dict[str, Any] = {}
    transport: str | None = None  # the URL's scheme names it
    if settings.effective_broker_url.startswith("filesystem"):
        transport = file_broker.TRANSPORT  # message files complete before they are seen
        # The embedded broker: one folder of message files shared by every local process.
        folder = settings.broker_folder
        for sub in ("queue", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "polling_interval": 0.05,
        }
    elif settings.effective_broker_url.startswith(("redis", "rediss")):
        # Start messages are acknowledged within seconds (training is supervised outside
        # the task), so the visibility timeout only bounds redelivery after a crash.
        options = {"visibility_timeout": settings.broker_visibility_timeout_s}
        if settings.redis_key_prefix:
            options["global_keyprefix"] = settings.redis_key_prefix
    app.conf.update(
        broker_transport=transport,
        broker_transport_options=options,
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Off unless the operator asks (AMPFLEET_CELERY_MONITORING): /v1/nodes and /metrics
        # are the monitoring surface; remote control and events cost broker traffic.
        worker_enable_remote_control=settings.celery_monitoring,
        worker_send_task_events=settings.celery_monitoring,
        task_send_sent_event=settings.celery_monitoring,
        task_ignore_result=True,
        task_default_queue=SCHEDULER_QUEUE,
        worker_hijack_root_logger=False,
    )
    return app


@lru_cache
def get_celery() -> Celery:
    return make_celery(get_settings())


def enqueue(session: Session, *, queue: str, task: str, **kwargs: Any) -> OutboxMessage:
    """Write a message to the outbox in the caller's transaction; `relay_outbox` sends it."""
    message = OutboxMessage(queue=queue, task=task, kwargs=kwargs)
    session.add(message)
    return message


def relay_outbox(session: Session, limit: int = 500) -> int:
    """Send committed outbox messages in id order, marking each sent; returns how many."""
    pending = session.scalars(
        select(OutboxMessage)
        .where(OutboxMessage.sent_at.is_(None))
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
    Wake-ups asked for while one is still waiting to be sent ride along with it."""
    if _wake_pending.is_set():
        return
    _wake_pending.set()
    _waker.submit(_send_wake)


def _send_wake() -> None:
    _wake_pending.clear()  # later wake-ups need a message of their own: this one is leaving
    try:
        get_celery().send_task(WAKE_SCHEDULER, queue=SCHEDULER_QUEUE, retry=False)
    except Exception:
        log.warning("could not wake the scheduler; it will find the work on its next poll")
