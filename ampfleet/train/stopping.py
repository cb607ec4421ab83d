"""The signals that ask a script's ranks to stop: SIGTERM (script mode's preemption and
cancel) and SIGUSR1 (the built-in loop's, which the launcher passes on as well).

The handler only sets a flag: the ranks agree on stopping at a step boundary
(`Session.should_stop`), checkpoint there and exit. A handler the script installed itself
is still called after ours, so its own clean-up runs as it did before.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

Handler = Callable[[int, FrameType | None], Any] | int | None


class StopSignals:
    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: dict[int, Handler] = {}

    def install(self) -> None:
        """Only from the main thread (Python delivers signals there); elsewhere the session
        sees no signal and only stop.max_steps or the runtime ends the run."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested.set()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):  # not the main thread, or None
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
