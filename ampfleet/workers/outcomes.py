"""How an attempt ended, recorded once every rank of it on this node has exited: a
transition of the job (and its event) by the reason the agent stopped it, or by how its
ranks exited on their own.

A failure a rank reported (its exception) is deterministic and fails the job; ranks that
died without a report (a signal, the OOM killer, a lost peer) are retried; a hang restarts
the job and may cordon the node; a preempted attempt goes back to the queue. Of a
multi-node attempt, only rank 0's node records a success: it exports the model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.memory import MB
from ampfleet.core.models import Job
from ampfleet.core.node_health import HUNG, cordon_if_hanging
from ampfleet.core.settings import Settings
from ampfleet.core.states import JobState
from ampfleet.workers.attempts import EXITABLE, RunningAttempt
from ampfleet.workers.heartbeat import describe
from ampfleet.workers.rundir import PEER_LOST

log = logging.getLogger(__name__)


class Outcomes:
    """Records the ends of this node's attempts."""

    def __init__(self, settings: Settings, exit_grace: Callable[[RunningAttempt], float]) -> None:
        """`exit_grace`: how long finished ranks had to exit before they were stopped."""
        self.settings = settings
        self.exit_grace = exit_grace

    def record(self, session: Session, attempt: RunningAttempt) -> None:
        """The job's transition for the attempt's end: its ranks here have all exited."""
        request = attempt.request
        job_id, number = attempt.key
        code = attempt.process.returncode
        log.info("%s attempt %s exited with %s (%s)", job_id, number, code, attempt.stop_reason)
        if attempt.stop_reason == "cancel":
            transition(
                session,
                job_id,
                JobState.CANCELLED,
                from_states={JobState.CANCELLING},
                attempt=number,
                reason="cancelled",
                message="every rank stopped",
            )
        elif attempt.stop_reason == "timeout":
            transition(
                session,
                job_id,
                JobState.TIMED_OUT,
                from_states=EXITABLE,
                attempt=number,
                reason="max_runtime",
                message=f"ran longer than stop.max_runtime_s={request.max_runtime_s}"
                + (
                    f" and the {self.settings.preempt_grace_s:.0f}s it gets to finish after it"
                    if request.runtime_only
                    else ""
                ),
                failure_reason=f"exceeded max_runtime_s={request.max_runtime_s}",
            )
        elif attempt.stop_reason == "hung":
            self._record_hang(session, attempt)
        elif attempt.stop_reason == "preempt":
            self._record_preempted(session, attempt)
        elif attempt.stop_reason == "disk_limit":
            used = attempt.disk_usage
            reason = (
                f"its run and checkpoint folders on node {self.settings.node_name} held "
                + (f"{used.bytes // MB:,} MB" if used and used.complete else "too many files")
                + f", over the limit of {self.settings.sandbox_max_disk_mb:,} MB "
                "(AMPFLEET_SANDBOX_MAX_DISK_MB)"
            )
            _fail(session, attempt, "disk_limit", reason)
        elif attempt.stop_reason == "invalid_record":
            reason = f"rank 0 wrote a record the platform cannot accept: {attempt.invalid_record}"
            _fail(session, attempt, "invalid_record", reason)
        elif code == 0 or attempt.stop_reason == "finished":
            if request.node_rank != 0:
                # Rank 0's node exports and uploads the model: the job succeeds when that
                # node's uploads are done, not when another node's ranks are.
                log.info("%s attempt %s: this node's ranks finished", job_id, number)
                return
            # Stopped after `finished`: the run and its export were complete before.
            transition(
                session,
                job_id,
                JobState.SUCCEEDED,
                from_states=EXITABLE,
                attempt=number,
                reason="completed",
                message="training finished"
                + (
                    f"; its ranks were stopped {self.exit_grace(attempt):.0f}s after it as they "
                    "had not exited"
                    if attempt.stop_reason == "finished"
                    else ""
                ),
            )
        else:
            self._record_failure(session, attempt, code)

    def _record_hang(self, session: Session, attempt: RunningAttempt) -> None:
        """Restart it (or fail it, past its restarts), saying where each rank was; a node
        where attempts keep hanging is cordoned."""
        request = attempt.request
        where = describe(attempt.beats, time.time()) if attempt.beats else "no rank had beaten"
        requeue_or_fail(
            session,
            request.job_id,
            request.attempt,
            reason=HUNG,
            message=f"no rank on node {self.settings.node_name} moved on for "
            f"{attempt.request.hang_timeout_s:.0f}s (the hang timeout): {where}. The rank "
            "furthest behind is the likely culprit, the others wait for it in a collective; "
            "each rank's Python stacks at the hang are in its stderr log",
        )
        job = session.get(Job, request.job_id)
        if job is not None:
            cordon_if_hanging(session, self.settings.node_name, job, self.settings)

    def _record_preempted(self, session: Session, attempt: RunningAttempt) -> None:
        job_id, number = attempt.key
        if transition(
            session,
            job_id,
            JobState.CANCELLED,
            from_states={JobState.CANCELLING},
            attempt=number,
            reason="cancelled",
            message="cancelled while being preempted; every rank stopped",
        ):
            return
        where = (
            f"checkpointed at step {attempt.feed.preempted_at_step}"
            if attempt.feed.preempted_at_step is not None
            else "stopped before it could checkpoint; resumes from its last checkpoint"
        )
        transition(
            session,
            job_id,
            JobState.QUEUED,
            from_states={JobState.PREEMPTED},
            attempt=number,
            reason="requeued_after_preemption",
            message=f"{where}; back in the queue",
        )

    def _record_failure(self, session: Session, attempt: RunningAttempt, code: int) -> None:
        job_id, number = attempt.key
        failures = attempt.request.run_dir.failures()
        if failures and all(f["type"] == PEER_LOST for f in failures):
            # Its peers' node or ranks died: theirs to say why (a node's agent that lived
            # reports it), retried as a lost node is.
            first = failures[0]
            requeue_or_fail(
                session,
                job_id,
                number,
                reason="peer_lost",
                message=f"rank {first['rank']} on node {self.settings.node_name} lost its "
                f"peers: {first['message']}",
            )
            return
        if failures:
            # The recipe or the loop raised: deterministic, so retrying would fail again.
            first = failures[0]
            reason = f"rank {first['rank']}: {first['type']}: {first['message']}"
            _fail(session, attempt, "training_error", reason)
            return
        # No exception was recorded: the ranks were killed (OOM killer, signal, lost peer).
        requeue_or_fail(
            session,
            job_id,
            number,
            reason="ranks_lost",
            message=f"the ranks on node {self.settings.node_name} exited with code {code} "
            f"without an error report (killed or out of memory?)",
        )


def _fail(session: Session, attempt: RunningAttempt, reason: str, words: str) -> None:
    """FAILED, for a reason of its own (`reason`, the event's) said in `words`."""
    job_id, number = attempt.key
    transition(
        session,
        job_id,
        JobState.FAILED,
        from_states=EXITABLE,
        attempt=number,
        reason=reason,
        message=words,
        failure_reason=words,
    )
