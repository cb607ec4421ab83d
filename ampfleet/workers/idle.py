"""A project's idle policy, applied by each node agent to the ranks it runs.

A job that holds accelerators and leaves them idle (a notebook-style job waiting for input,
a loader stuck on a slow store, a loop that sleeps) costs the fleet as much as one that
trains. The node agent already samples its ranks (telemetry.py); a job whose busiest rank on
this node stays under the project's `below_percent` for `window_s` seconds on end is idle:
an `idle` event says so with the figures, once per idle spell (and `busy_again` when it
recovers), and a project whose policy says `stop` has the job cancelled.

Utilisation is the GPU's (NVML) where the ranks hold GPUs, else CPU percent of one core: on
a CPU node a rank that computes keeps at least one core busy. Start-up is not watched (a
rank importing and loading data is not idle by choice); the hang detection covers ranks that
stopped moving at all. Each node decides for its own ranks: on a multi-node job the first
node that sees its ranks idle for the window acts.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from ampfleet.core.cancelling import request_cancel
from ampfleet.core.idle_policy import IdlePolicy
from ampfleet.core.lifecycle import record_event
from ampfleet.core.models import Job
from ampfleet.workers.telemetry import by_kind


def busiest(sample: dict[str, float]) -> float | None:
    """The busiest rank's utilisation in a telemetry sample: its GPU's where NVML reports
    one, else its CPU percent; None when no rank was sampled."""
    kinds = by_kind(sample)
    values = kinds["gpu_util_percent"] or kinds["cpu_percent"]
    return max(values) if values else None


@dataclass
class IdleWatch:
    below_since: float | None = None
    """Monotonic seconds when the current spell under the threshold began."""
    told: bool = False
    """This spell has been reported."""
    last_sample: float = float("-inf")
    """When the telemetry sample it last observed was taken."""

    def fresh(self, sampled_at: float) -> bool:
        """Whether a sample taken at `sampled_at` is one it has not observed yet."""
        if sampled_at <= self.last_sample:
            return False
        self.last_sample = sampled_at
        return True

    def observe(self, policy: IdlePolicy, now: float, utilisation: float | None) -> str | None:
        """`idle` when a spell reaches the window, `busy_again` when a reported one ends."""
        if utilisation is None:
            return None
        if utilisation >= policy.below_percent:
            ended = self.told
            self.below_since, self.told = None, False
            return "busy_again" if ended else None
        self.below_since = now if self.below_since is None else self.below_since
        if not self.told and now - self.below_since >= policy.window_s:
            self.told = True
            return "idle"
        return None

    def forget(self) -> None:
        """No policy (any more): a spell starts again from nothing when one is set."""
        self.below_since, self.told = None, False


def act(
    session: Session,
    job: Job,
    verdict: str,
    policy: IdlePolicy,
    utilisation: float,
    node: str,
) -> None:
    """Says what the watch saw, and cancels the job when the policy says stop."""
    if verdict == "busy_again":
        record_event(
            session, job, "busy_again", f"busy again on node {node}: {utilisation:.0f}% utilised"
        )
        return
    stops = policy.action == "stop"
    record_event(
        session,
        job,
        "idle",
        f"idle on node {node}: its busiest rank under {policy.below_percent:g}% for "
        f"{policy.window_s:.0f}s on end (now {utilisation:.0f}%)"
        + ("; the project's idle policy stops it" if stops else ""),
    )
    if stops:
        request_cancel(
            session,
            job.id,
            attempt=job.attempt,
            reason="idle_policy",
            message=f"stopped by project {job.project}'s idle policy",
        )
