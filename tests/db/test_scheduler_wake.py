"""A wake-up (a submit, freed slots) starts a scheduling pass at once, on both brokers (Redis,
and the embedded broker's files), rather than at the next poll of the database."""

from __future__ import annotations

import threading

from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.settings import get_settings
from ampfleet.scheduler.loop import Scheduler
from tests.support.env import environment

# Far longer than the test may take: a pass after the first comes only from a wake-up.
POLL_S = "3600"
PASS_TIMEOUT_S = 60


class CountedScheduler(Scheduler):
    """The real scheduler, telling each pass it ends."""

    def __init__(self) -> None:
        super().__init__(get_settings())
        self.passes = threading.Semaphore(0)

    def run_pass(self) -> int:
        placed = super().run_pass()
        self.passes.release()
        return placed


def test_a_wake_up_starts_a_pass_before_the_poll_would(backend: str) -> None:
    with environment({"AMPFLEET_SCHEDULER_POLL_S": POLL_S}):
        scheduler = CountedScheduler()
        loop = threading.Thread(target=scheduler.run_forever, daemon=True)
        loop.start()
        try:
            assert scheduler.passes.acquire(timeout=PASS_TIMEOUT_S)  # the pass on starting
            wake_scheduler()
            assert scheduler.passes.acquire(timeout=PASS_TIMEOUT_S), "the wake-up was lost"
        finally:
            scheduler.stop()
            loop.join(timeout=PASS_TIMEOUT_S)
        assert not loop.is_alive()


def test_a_stop_ends_the_wait_for_a_wake_up(backend: str) -> None:
    """A scheduler asked to stop (SIGTERM, in the process) while it waits on the broker stops
    then, not at the end of its poll interval: an hour here."""
    with environment({"AMPFLEET_SCHEDULER_POLL_S": POLL_S}):
        scheduler = CountedScheduler()
        loop = threading.Thread(target=scheduler.run_forever, daemon=True)
        loop.start()
        assert scheduler.passes.acquire(timeout=PASS_TIMEOUT_S)  # waiting after its first pass
        scheduler.stop()
        loop.join(timeout=PASS_TIMEOUT_S)
        assert not loop.is_alive(), "the stop waited for the poll interval"
