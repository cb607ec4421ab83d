"""When the node agent stops an attempt's ranks, and how: the job's state (cancel,
preemption, a newer attempt), its limits (runtime, disk), and its silence (a hang, or ranks
that finished but do not exit).

A stop signals the launcher's process group (SIGUSR1 to checkpoint for a preemption, SIGTERM
otherwise) and sets when SIGKILL follows; the attempt's end is recorded by the supervisor
once every rank has exited (outcomes.py says how it ended, by its `stop_reason`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable

from ampfleet.core.memory import MB
from ampfleet.core.settings import Settings
from ampfleet.core.states import SLOT_HOLDING_STATES, JobState
from ampfleet.workers import disk
from ampfleet.workers.attempts import RunningAttempt
from ampfleet.workers.heartbeat import read_beats
from ampfleet.workers.training.entry import STACKS_SIGNAL

log = logging.getLogger(__name__)
HUNG_KILL_AFTER_S = 2.0
"""How long a hung attempt's ranks get between their stacks and SIGKILL."""


class StopRules:
    """This node's rules for stopping the attempts it runs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def check(self, attempt: RunningAttempt, current: tuple[str, int] | None) -> None:
        """Stops the attempt if it should stop now; `current`: the job's (state, attempt)
        as the database has them, None if the job is gone."""
        if attempt.stop_reason:
            return
        request = attempt.request
        if (
            current is None
            or current[1] != request.attempt
            or JobState(current[0]) not in SLOT_HOLDING_STATES
        ):
            # Over (ended, or requeued by the reaper or a peer node): never two at once.
            self.stop(attempt, "superseded")
        elif current[0] == JobState.CANCELLING:
            self.stop(attempt, "cancel")
        elif current[0] == JobState.PREEMPTED:
            self.stop(attempt, "preempt")
        elif self._past_runtime(attempt):
            self.stop(attempt, "timeout")
        elif self._over_disk_limit(attempt):
            self.stop(attempt, "disk_limit")
        elif attempt.finished:
            # The run is complete and recorded: silence now is the ranks shutting down (a
            # loaded node, a long garbage collection), never a hang. They get a grace.
            if self._silent_for(attempt) > self.exit_grace(attempt):
                self.stop(attempt, "finished")
        elif self._silent_for(attempt) > self._silence_allowed(attempt):
            self.stop(attempt, "hung")

    def _past_runtime(self, attempt: RunningAttempt) -> bool:
        """Past stop.max_runtime_s; a runtime-only job's ranks get a grace after it to
        evaluate, checkpoint and export: the same grace a preempted job gets to checkpoint."""
        request = attempt.request
        if not request.max_runtime_s:
            return False
        grace = self.settings.preempt_grace_s if request.runtime_only else 0.0
        return time.monotonic() - attempt.started > request.max_runtime_s + grace

    def _silent_for(self, attempt: RunningAttempt) -> float:
        """Seconds since any rank of this node beat, or rank 0 last reported, if later."""
        attempt.beats = read_beats(attempt.request.run_dir.path) or attempt.beats
        if attempt.beats:
            attempt.heard_from = True
        latest = max([attempt.last_news, *(beat.time for beat in attempt.beats)])
        return time.time() - latest

    def _silence_allowed(self, attempt: RunningAttempt) -> float:
        """The hang timeout is for a running job; until its ranks first beat or report, they
        are still starting (importing torch, building data, meeting at the rendezvous), which
        on a busy node can outlast a short hang timeout, so start-up gets the start timeout."""
        if attempt.heard_from:
            return attempt.request.hang_timeout_s
        return max(attempt.request.hang_timeout_s, self.settings.start_timeout_s)

    def _over_disk_limit(self, attempt: RunningAttempt) -> bool:
        """Whether a sandboxed attempt's folders hold more than its disk limit (measured
        every few seconds: disk.py); `disk_usage` keeps what was found."""
        now = time.monotonic()
        if attempt.contained is None or now - attempt.disk_checked_at < disk.CHECK_EVERY_S:
            return False
        attempt.disk_checked_at = now
        attempt.disk_usage = disk.usage(attempt.folders)
        limit = self.settings.sandbox_max_disk_mb * MB
        return attempt.disk_usage.bytes > limit or not attempt.disk_usage.complete

    def exit_grace(self, attempt: RunningAttempt) -> float:
        """How long ranks that finished may take to exit before they are stopped."""
        return max(attempt.request.hang_timeout_s, self.settings.start_timeout_s)

    def stop(self, attempt: RunningAttempt, reason: str) -> None:
        if attempt.stop_reason:
            return
        attempt.stop_reason = reason
        log.info("stopping %s attempt %s: %s", *attempt.key, reason)
        if reason == "hung":
            # Every rank's stacks into its stderr log, before it stops: which one hung
            # where, and which wait for it in a collective.
            for pid in attempt.telemetry.rank_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, STACKS_SIGNAL)
        if reason == "preempt":
            # SIGUSR1: the ranks checkpoint at the next step boundary and exit (entry.py).
            attempt.kill_at = time.monotonic() + self.settings.preempt_grace_s
            _signal_group(attempt.process, signal.SIGUSR1)
        elif reason == "hung":
            # A hung rank, and the ranks waiting for it inside a collective, are in C code:
            # Python never runs their SIGTERM handler, so the cancel grace would only delay
            # the restart. Their stacks come from faulthandler's own signal handler at once.
            attempt.kill_at = time.monotonic() + HUNG_KILL_AFTER_S
            _signal_group(attempt.process, signal.SIGTERM)
        else:
            attempt.kill_at = time.monotonic() + self.settings.cancel_grace_s
            _signal_group(attempt.process, signal.SIGTERM)


def enforce_kill_deadlines(attempts: Iterable[RunningAttempt]) -> None:
    """SIGKILL for the process group of each attempt still running past its stop's grace."""
    now = time.monotonic()
    for attempt in attempts:
        if attempt.kill_at and now >= attempt.kill_at and attempt.process.poll() is None:
            _signal_group(attempt.process, signal.SIGKILL)
            attempt.kill_at = None


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
