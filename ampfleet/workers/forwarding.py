"""One attempt's news, into the database transaction of its pass: rank 0's new records,
every rank's new log lines, the node's telemetry of its ranks, and what the project's idle
policy makes of that telemetry.

The feed moves past what was read only once that transaction commits (the supervisor's
pass): nothing a rank reports is lost to a failed pass.
"""

from __future__ import annotations

import time

from sqlalchemy.orm import Session

from ampfleet.core import idle_policy
from ampfleet.core.models import Job
from ampfleet.core.settings import Settings
from ampfleet.workers.attempts import RunningAttempt
from ampfleet.workers.idle import act, busiest
from ampfleet.workers.ingest import (
    apply_one_by_one,
    apply_records,
    report_rejections,
    ship_logs,
    store_points,
)
from ampfleet.workers.stopping import StopRules

CAREFUL_AFTER_FAILED_PASSES = 2
"""Failed passes of one attempt (not the database's fault) before its records go one by one."""


class Forwarder:
    def __init__(self, settings: Settings, stops: StopRules) -> None:
        self.settings = settings
        self.stops = stops

    def forward(self, session: Session, attempt: RunningAttempt) -> None:
        """Rank 0's new records and every rank's new log lines, into this transaction (the
        feed moves past them only once it commits: see `Supervisor._sync`)."""
        request = attempt.request
        job = session.get(Job, request.job_id)
        if job is None or job.attempt != request.attempt:
            return  # fenced out: left unread, for the next attempt to adopt what it covers
        records = attempt.reader.read_new()
        request.trace.observe(records)
        if records:
            attempt.last_news = time.time()
            attempt.heard_from = True
            attempt.finished = attempt.finished or any(r["kind"] == "finished" for r in records)
        essential = report_rejections(session, job, attempt.feed, attempt.reader.rejected)
        if essential is not None:
            attempt.invalid_record = essential.describe(request.run_dir.events_file.name)
            self.stops.stop(attempt, "invalid_record")
        settings = self.settings
        if attempt.failed_passes >= CAREFUL_AFTER_FAILED_PASSES:
            apply_one_by_one(session, job, request.attempt, records, attempt.feed, settings)
        else:
            apply_records(session, job, request.attempt, records, attempt.feed, settings)
        ship_logs(session, job, request.attempt, attempt.feed, settings)
        sampled = attempt.telemetry.take(job.step)
        if store_points(session, job, request.attempt, sampled, settings):
            job.latest_metrics = {**(job.latest_metrics or {}), **{n: v for _, n, v in sampled}}
        self._watch_idle(session, job, attempt)

    def _watch_idle(self, session: Session, job: Job, attempt: RunningAttempt) -> None:
        """The project's idle policy (idle.py) on each new telemetry sample, once the ranks
        are past start-up; read then, so that a change applies to running jobs."""
        telemetry = attempt.telemetry
        if not attempt.idle.fresh(telemetry.sampled_at):
            return
        policy = idle_policy.of_project(session, job.project)
        if policy is None or not attempt.heard_from or attempt.stop_reason:
            attempt.idle.forget()
            return
        utilisation = busiest(telemetry.latest)
        verdict = attempt.idle.observe(policy, telemetry.sampled_at, utilisation)
        if verdict is not None and utilisation is not None:
            act(session, job, verdict, policy, utilisation, self.settings.node_name)
