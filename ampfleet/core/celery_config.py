"""The Celery configuration every process shares, and nothing else: a module the broker's
packages alone can import, so a monitoring host (Flower, `celery inspect`) gets the same broker,
key prefix and transport as the fleet without the database, torch or any training code.

The task names live here too: they are what a monitor sees and what a sender names.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

from ampfleet.core import file_broker
from ampfleet.core.settings import SCHEDULER_QUEUE, Settings

START_ATTEMPT = "ampfleet.start_attempt"
WAKE_SCHEDULER_QUEUE = Queue(
    SCHEDULER_QUEUE, Exchange(SCHEDULER_QUEUE, type="direct"), routing_key=SCHEDULER_QUEUE
)
"""Where the scheduler listens for wake-ups: a plain kombu message, not a Celery task
(see messaging.wake_scheduler)."""


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
