"""Waiting on a broker so that a stop is seen soon: in slices.

A signal does not end a wait on the broker's socket (Python resumes the wait after the
handler), and Celery's loop for a transport without an event loop sees a shutdown only
between its waits; so a process asked to stop sat in a wait to its end: the scheduler a
whole poll interval, an embedded Celery worker 2 s. Every wait on a broker that must end
on a stop goes through `drain_in_slices`.
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic

STOP_CHECK_S = 0.25
"""The longest one wait for messages lasts, so a stop is seen that soon."""


def drain_in_slices(
    drain: Callable[[float], None], timeout: float | None, stopping: Callable[[], bool]
) -> None:
    """`drain(seconds)` (a kombu drain_events) until it returns (a message came), for up to
    `timeout` seconds in all (None: no limit); TimeoutError at the deadline, or after a
    slice once `stopping()` says so."""
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        left = STOP_CHECK_S if deadline is None else deadline - monotonic()
        if left <= 0:
            raise TimeoutError()
        try:
            drain(min(left, STOP_CHECK_S))
            return
        except TimeoutError:  # socket.timeout is TimeoutError
            if stopping():
                raise
