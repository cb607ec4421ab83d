"""Celery's task events as Flower keeps them: a receiver on the broker folds every event
into a `celery.events.state.State`, and is known to be listening before the test goes on
(it has seen a probe event of its own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.events.state import State

PROBE = "probe-listening"
LISTEN_TIMEOUT_S = 30.0


@contextmanager
def watching(app: Celery) -> Iterator[State]:
    state = State()
    listening = threading.Event()

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == PROBE:
            listening.set()
        else:
            state.event(event)

    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"*": on_event})
        capture = threading.Thread(target=receiver.capture, kwargs={"wakeup": False}, daemon=True)
        capture.start()
        try:
            with app.events.default_dispatcher() as dispatcher:
                for _ in range(int(LISTEN_TIMEOUT_S / 0.2)):
                    dispatcher.send(PROBE)
                    if listening.wait(0.2):
                        break
            assert listening.is_set(), "the event receiver never started listening"
            yield state
        finally:
            receiver.should_stop = True
            capture.join(timeout=10)


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Events arrive on the receiver's thread: poll until `predicate` holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
