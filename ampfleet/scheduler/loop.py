"""`ampfleet scheduler`: place queued jobs, reap lost attempts, relay the outbox.

A pass runs when something wakes the scheduler (a submit, a finished attempt: a message on
the `scheduler` queue) and at least every `scheduler_poll_s`. A pass reads the world
(snapshot.py), decides with pure functions (placement.py) and writes the decisions, the
allocations and the start messages in one transaction (apply.py); the messages are sent
only after that commits. Several schedulers may run: a PostgreSQL advisory lock lets one
pass run at a time, so a standby takes over as soon as the active one stops.

Where the operator configured a Slurm pool, each pass also applies what slurmrestd last said
of its nodes and jobs (before placing); every call to slurmrestd, the submits of what the
pass placed there among them, runs on the backend's own thread, outside any transaction
(scheduler/slurm/backend.py; the boundary is core/backends.py).

A scheduler that could not reach the database knows the nodes could not write their
heartbeats either: from the pass that reaches it again, every node has a whole node timeout
to be heard from before the reaper calls it lost (core/fleet.py, `silent_before`).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import TYPE_CHECKING

from kombu.connection import Connection
from kombu.message import Message
from sqlalchemy import text
from sqlalchemy.orm import Session

from ampfleet.core.broker_wait import drain_in_slices
from ampfleet.core.celery_config import WAKE_SCHEDULER_QUEUE
from ampfleet.core.db import database_unavailable, is_postgres, session_scope
from ampfleet.core.messaging import get_celery, relay_outbox
from ampfleet.core.models import utcnow
from ampfleet.core.settings import Settings, get_settings
from ampfleet.scheduler import snapshot
from ampfleet.scheduler.apply import apply
from ampfleet.scheduler.reaper import reap
from ampfleet.scheduler.sweeps import advance_sweeps

if TYPE_CHECKING:
    from ampfleet.scheduler.slurm.backend import SlurmBackend

log = logging.getLogger(__name__)
ADVISORY_LOCK_KEY = 0x616D70666C656574  # "ampfleet": one placing scheduler at a time


class Scheduler:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.slurm = _slurm_backend(self.settings)
        self._stop = threading.Event()
        self._database_lost = False
        self.watched_since: datetime | None = None
        """When a pass last reached the database after one could not; None: none failed."""

    def stop(self) -> None:
        self._stop.set()
        if self.slurm is not None:
            self.slurm.stop()

    # -- one pass -------------------------------------------------------------------------

    def run_pass(self) -> int:
        """Reap lost attempts, place what fits, explain what waits; then send messages."""
        with session_scope() as session:
            took_lock = self._take_lock(session)
            now = utcnow()
            if self._database_lost:
                session.connection()  # reached again (on SQLite, nothing has asked yet)
                self.watched_since, self._database_lost = now, False
            if not took_lock:
                return 0  # another scheduler is in its pass; it will do this work
            if self.slurm is not None:
                self.slurm.sync(session, now)
            reap(session, self.settings, now, self.watched_since)
            advance_sweeps(session, now)  # before placement: its new trials are placed now
            world = snapshot.load(session, self.settings, now)
            decision = world.decide()
            placed = apply(session, world, decision)
        if self.slurm is not None:
            self.slurm.passed()
        with session_scope() as session:
            relay_outbox(session)
        return placed

    def _take_lock(self, session: Session) -> bool:
        if not is_postgres(session):
            return True  # SQLite: BEGIN IMMEDIATE already serialises writers
        return bool(
            session.scalar(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
        )

    # -- the process ----------------------------------------------------------------------

    def run_forever(self) -> None:
        log.info("scheduler running (poll every %.1fs)", self.settings.scheduler_poll_s)
        if self.slurm is not None:
            self.slurm.start()
        while not self._stop.is_set():
            try:
                with get_celery().connection_for_read() as connection:
                    self._serve(connection)
            except Exception:
                log.warning("broker unavailable; polling the database only", exc_info=True)
                self._safe_pass()
                self._stop.wait(self.settings.scheduler_poll_s)

    def _serve(self, connection: Connection) -> None:
        def on_wake(_body: object, message: Message) -> None:
            message.ack()

        with connection.Consumer([WAKE_SCHEDULER_QUEUE], callbacks=[on_wake], accept=["json"]):
            while not self._stop.is_set():
                self._safe_pass()
                if self._woken(connection):
                    _drain_without_waiting(connection)

    def _woken(self, connection: Connection) -> bool:
        """Waits up to `scheduler_poll_s` for a wake-up; whether one came."""
        try:
            drain_in_slices(
                lambda seconds: connection.drain_events(timeout=seconds),
                self.settings.scheduler_poll_s,
                self._stop.is_set,
            )
        except TimeoutError:
            return False
        return True

    def _safe_pass(self) -> None:
        try:
            placed = self.run_pass()
            if placed:
                log.info("placed %d job(s)", placed)
        except Exception as error:
            if database_unavailable(error):
                self._database_lost = True
            log.exception("scheduling pass failed; retrying on the next pass")


def _slurm_backend(settings: Settings) -> SlurmBackend | None:
    """The Slurm pool, where the operator configured one (core/backends.py)."""
    if not settings.slurm_pool:
        return None
    from ampfleet.scheduler.slurm.backend import SlurmBackend

    return SlurmBackend(settings)


def _drain_without_waiting(connection: Connection) -> None:
    """Many wake-ups that arrive together need only one pass."""
    for _ in range(1000):
        try:
            connection.drain_events(timeout=0.01)
        except TimeoutError:
            return
