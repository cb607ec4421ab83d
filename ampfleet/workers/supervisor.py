"""Supervises the attempts running on this node.

One long-lived thread launches each attempt (attempt_launch.py; PR_SET_PDEATHSIG is tied to
the thread that forks, so it must outlive the children), forwards rank 0's records to the
database in batches (forwarding.py), stops attempts when they should stop (stopping.py),
and records how each attempt ended (outcomes.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core.allocations import release_node_share
from ampfleet.core.db import database_unavailable, session_scope
from ampfleet.core.lifecycle import transition
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.models import Job
from ampfleet.core.settings import Settings
from ampfleet.core.states import LAUNCHED_STATES, JobState
from ampfleet.workers.attempt_launch import AttemptLauncher
from ampfleet.workers.attempts import LaunchRequest, RunningAttempt
from ampfleet.workers.containment import report_limits
from ampfleet.workers.forwarding import Forwarder
from ampfleet.workers.outcomes import Outcomes
from ampfleet.workers.profile_handover import hand_over_profiles
from ampfleet.workers.stopping import StopRules, enforce_kill_deadlines
from ampfleet.workers.telemetry import node_totals
from ampfleet.workers.uploads import ArtifactUploader

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        rank_memory_limit_mb: int | None = None,
        gpus: int = 0,
        slot_memory_mb: int | None = None,
    ) -> None:
        """The node's memory and GPUs, for the attempts it launches (AttemptLauncher)."""
        self.settings = settings
        self.launcher = AttemptLauncher(settings, rank_memory_limit_mb, gpus, slot_memory_mb)
        self.stops = StopRules(settings)
        self.forwarder = Forwarder(settings, self.stops)
        self.outcomes = Outcomes(settings, self.stops.exit_grace)
        self._requests: queue.Queue[LaunchRequest] = queue.Queue()
        self._running: dict[tuple[str, int], RunningAttempt] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._last_sync = 0.0
        self.uploads = ArtifactUploader(settings)

    def start(self) -> None:
        self.launcher.clear_stale_egress()
        self.uploads.start()
        self._thread.start()

    def launch(self, request: LaunchRequest) -> None:
        """Launches once this node holds the job's latest stored checkpoint."""
        self.uploads.restore_then(request.job_id, lambda: self._requests.put(request))

    def node_telemetry(self) -> dict[str, float]:
        """What this node's ranks use now, for its heartbeat (another thread: a snapshot)."""
        return node_totals(a.telemetry.latest for a in list(self._running.values()))

    def shutdown(self, reason: str = "node_shutdown", message: str | None = None) -> None:
        """Preempt every attempt (they checkpoint and go back to the queue), then stop."""
        message = message or f"node {self.settings.node_name} is shutting down"
        for attempt in list(self._running.values()):
            with session_scope() as session:
                transition(
                    session,
                    attempt.request.job_id,
                    JobState.PREEMPTED,
                    from_states=LAUNCHED_STATES,
                    attempt=attempt.request.attempt,
                    reason=reason,
                    message=message,
                )
            self.stops.stop(attempt, "preempt")
        deadline = time.monotonic() + self.settings.preempt_grace_s + 5
        while self._running and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop.set()
        self._thread.join(timeout=10)
        self.launcher.close()
        self.uploads.stop(timeout=10)

    # -- the loop -------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._launch_pending()
                self.launcher.fill_warm_pool(starting=self._starting())
                due = time.monotonic() - self._last_sync >= self.settings.metrics_flush_s
                if due or self._newly_exited():
                    self._sync()
                    self._last_sync = time.monotonic()
                enforce_kill_deadlines(self._running.values())
            except Exception:
                log.exception("supervisor pass failed; retrying")
                time.sleep(1.0)
            time.sleep(0.05)

    def _starting(self) -> bool:
        """Whether an attempt waits to be launched, or one here is still starting."""
        if not self._requests.empty():
            return True
        return any(not a.heard_from and a.process.poll() is None for a in self._running.values())

    def _launch_pending(self) -> None:
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                with request.trace.current():
                    self._running[(request.job_id, request.attempt)] = self.launcher.start(request)
                request.trace.spawned()
            except Exception as exc:
                log.exception("could not launch %s attempt %s", request.job_id, request.attempt)
                request.trace.failed(f"the node could not launch the ranks: {exc}")
                with session_scope() as session:
                    transition(
                        session,
                        request.job_id,
                        JobState.FAILED,
                        from_states=LAUNCHED_STATES,
                        attempt=request.attempt,
                        reason="launch_failed",
                        message=f"the node could not launch the ranks: {exc}",
                        failure_reason=f"launch failed on node {self.settings.node_name}: {exc}",
                    )
                    release_node_share(session, request.job_id, request.attempt, request.node_rank)

    def _sync(self) -> None:
        """Records in, decisions out: each attempt in a transaction of its own, so nothing
        one attempt writes can hold up another's reporting, cancel or outcome."""
        if not self._running:
            return
        with session_scope() as session:
            hand_over_profiles(session, {a.key: a.request.run_dir for a in self._running.values()})
        ended = [a.key for a in list(self._running.values()) if self._sync_and_end(a)]
        for key in ended:
            attempt = self._running.pop(key)
            attempt.launcher_log.close()
            self.launcher.ended(attempt)
        if ended:
            wake_scheduler()  # slots were freed

    def _newly_exited(self) -> bool:
        """Whether an attempt's ranks exited since its last pass: its end is recorded now,
        not at the next interval (a pass that failed waits for it, as every other does)."""
        return any(
            attempt.process.poll() is not None and not attempt.drained and not attempt.failed_passes
            for attempt in self._running.values()
        )

    def _sync_and_end(self, attempt: RunningAttempt) -> bool:
        """One pass; the pass that drained an exited attempt (read and committed all it
        wrote) is followed at once by the one that records its end, where nothing it
        handed over is still uploading."""
        drained = attempt.drained
        return self._sync_attempt(attempt) or (
            attempt.drained and not drained and self._sync_attempt(attempt)
        )

    def _sync_attempt(self, attempt: RunningAttempt) -> bool:
        """One attempt's pass; whether it ended (its outcome is recorded, its slots free).

        A pass that fails is read again by the next, unless it failed for something the
        attempt's ranks wrote rather than for the database: then the attempt's passes go one
        record at a time (`careful`), and the record that fails is rejected (ingest.py)."""
        exited = attempt.process.poll() is not None
        finished = exited and self._ready_to_end(attempt)
        try:
            with session_scope() as session:
                self.forwarder.forward(session, attempt)
                if not exited:
                    self.stops.check(attempt, self._current_state(session, attempt))
                if finished:
                    self._record_outcome(session, attempt)
        except Exception as exc:
            attempt.feed.rollback()  # nothing read in this pass was stored: read it again
            if database_unavailable(exc):
                raise
            attempt.failed_passes += 1
            log.exception("%s attempt %s: pass %d failed", *attempt.key, attempt.failed_passes)
            return False
        attempt.failed_passes = 0
        attempt.feed.commit()
        self.uploads.submit(attempt.key, attempt.feed.take_artifacts(), attempt.folders)
        if exited:
            attempt.drained = True
        return finished

    def _ready_to_end(self, attempt: RunningAttempt) -> bool:
        """Whether to record how an exited attempt ended: once all it wrote was read and
        its uploads are done (a job is SUCCEEDED with its model listed, requeued with its
        last checkpoint in the store), or it waited for them long enough."""
        now = time.monotonic()
        attempt.exited_at = attempt.exited_at or now
        if not attempt.drained:
            return False
        if self.uploads.settled(attempt.key):
            return True
        if now - attempt.exited_at < self.settings.checkpoint_upload_timeout_s:
            return False
        log.warning("%s attempt %s ends with artifact uploads still pending", *attempt.key)
        return True

    def _current_state(self, session: Session, attempt: RunningAttempt) -> tuple[str, int] | None:
        row = session.execute(
            select(Job.state, Job.attempt).where(Job.id == attempt.request.job_id)
        ).first()
        return None if row is None else (row[0], row[1])

    def _record_outcome(self, session: Session, attempt: RunningAttempt) -> None:
        """How the attempt ended, and this node's slots back: every rank here has exited."""
        self.forwarder.forward(session, attempt)
        if attempt.contained is not None:  # its limits first: they may say why it ended
            report_limits(
                session, attempt.contained, attempt.request.job_id, self.settings.node_name
            )
        self.outcomes.record(session, attempt)
        request = attempt.request
        if attempt.contained is not None:
            attempt.contained.close()
        release_node_share(session, request.job_id, request.attempt, request.node_rank)
        request.trace.ended()
