"""Why each restart of a job happened: its transition to RESTARTING (reason, message, time),
put down to the fault a test injected that explains it, or to none.

A fault explains a restart when it can cause that reason and the restart came after the
fault began and within the timeout that reason waits for (plus some slack for a loaded
machine) after it ended: a node lost or restarted by a kill of that node (its next worker
requeues what it ran, or the reaper after the node timeout), a node lost by a database
outage (the nodes could not heartbeat), a start never claimed after a start message could
be lost (the broker emptied, a worker killed with it prefetched, the database away while
it was claimed). Where several fit, the latest to begin is taken: the nearest in time."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

NODE = re.compile(r"\bnode (node-[\w-]+)")

CAUSES = {
    "node_lost": ("worker", "postgres"),
    "node_restarted": ("worker",),
    "ranks_lost": ("worker",),
    "start_timeout": ("redis", "worker", "scheduler", "postgres"),
}
"""The faults that can restart an attempt for each reason; any other reason has none."""


@dataclass(frozen=True)
class Fault:
    kind: str  # worker | scheduler | api | postgres | redis
    started: datetime
    ended: datetime
    node: str | None = None  # the worker killed


@dataclass(frozen=True)
class Restart:
    job_id: str
    attempt: int
    time: datetime
    reason: str
    message: str

    @property
    def node(self) -> str | None:
        match = NODE.search(self.message)
        return match.group(1) if match else None


def cause_of(
    restart: Restart,
    faults: Iterable[Fault],
    *,
    node_timeout_s: float,
    start_timeout_s: float,
    slack_s: float,
) -> Fault | None:
    waits = start_timeout_s if restart.reason == "start_timeout" else node_timeout_s
    fitting = [
        fault
        for fault in faults
        if fault.kind in CAUSES.get(restart.reason, ())
        and (fault.kind != "worker" or restart.node in (None, fault.node))
        and fault.started <= restart.time <= fault.ended + timedelta(seconds=waits + slack_s)
    ]
    return max(fitting, key=lambda fault: fault.started, default=None)


def describe(restart: Restart, cause: Fault | None) -> str:
    if cause is None:
        what = "no injected fault"
    else:
        what = f"{cause.kind} kill of {cause.node}" if cause.node else cause.kind
    return f"attempt {restart.attempt} {restart.reason} ({what}): {restart.message}"


def by_cause(
    restarts: Sequence[Restart], faults: Sequence[Fault], **windows: float
) -> dict[str, list[tuple[Restart, Fault | None]]]:
    """Each job's restarts with what caused them, in order."""
    found: dict[str, list[tuple[Restart, Fault | None]]] = {}
    for restart in sorted(restarts, key=lambda r: (r.job_id, r.time)):
        cause = cause_of(restart, faults, **windows)
        found.setdefault(restart.job_id, []).append((restart, cause))
    return found
