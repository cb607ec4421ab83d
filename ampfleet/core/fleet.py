"""The fleet as placement sees it: nodes, job requests, and which node can host what.

Shared by the API (admission: can this job ever fit?) and the scheduler (placement), which
must agree on what "matches" means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from ampfleet.core.backends import POOL_LABEL, matches_backend
from ampfleet.core.models import Node
from ampfleet.core.spec import JobSpec


@dataclass(frozen=True)
class NodeView:
    id: str
    accelerator: str  # "cuda" | "cpu"
    gpu_model: str | None
    gpu_memory_mb: int | None
    labels: Mapping[str, str]
    slots: int
    free: int
    schedulable: bool = True  # False when cordoned or dead: never place new work there
    memory_mb: int | None = None  # what its slots share (core/memory.py); None: not said


@dataclass(frozen=True)
class JobRequest:
    id: str  # time-ordered: smaller id == submitted earlier (FIFO key)
    project: str
    priority: int  # 0 low, 1 normal, 2 high
    nodes: int | None  # explicit shape: nodes x procs_per_node ...
    procs_per_node: int | None
    total_procs: int | None  # ... or a total, packed onto the fewest nodes
    accelerator: str = "any"
    gpu_type: str | None = None
    min_gpu_memory_mb: int | None = None
    selector: Mapping[str, str] = field(default_factory=dict)
    min_procs: int | None = None
    """A restart that may run on fewer ranks, down to this (resources.procs_min), packed
    onto the fewest nodes, when its whole shape is not free; None: exactly its shape."""

    @property
    def slots(self) -> int:
        if self.total_procs is not None:
            return self.total_procs
        return (self.nodes or 1) * (self.procs_per_node or 1)


def matches(job: JobRequest, node: NodeView) -> bool:
    if job.accelerator not in ("any", node.accelerator):
        return False
    if job.gpu_type and (
        node.gpu_model is None or job.gpu_type.lower() not in node.gpu_model.lower()
    ):
        return False
    if job.min_gpu_memory_mb and (node.gpu_memory_mb or 0) < job.min_gpu_memory_mb:
        return False
    if not matches_backend(node.labels, job.selector):
        return False
    return all(node.labels.get(k) == v for k, v in job.selector.items())


def describe_constraints(job: JobRequest) -> str:
    parts = [] if job.accelerator == "any" else [job.accelerator]
    if job.gpu_type:
        parts.append(f"gpu_type={job.gpu_type}")
    if job.min_gpu_memory_mb:
        parts.append(f">={job.min_gpu_memory_mb} MB per GPU")
    parts += [f"{k}={v}" for k, v in sorted(job.selector.items())]
    return ", ".join(parts) or "any node"


def fits_fleet(job: JobRequest, nodes: Sequence[NodeView]) -> str | None:
    """None if the job could fit the fleet as registered (ignoring what is in use now);
    otherwise why not, as requested vs the largest matching node. An empty fleet admits
    everything: nodes register a moment after a fresh start."""
    if not nodes:
        return None
    matching = [n for n in nodes if matches(job, n)]
    if not matching:
        return f"no registered node matches {describe_constraints(job)}" + backend_hint(nodes)
    largest = max(n.slots for n in matching)
    if job.total_procs is not None:
        return _total_refusal(job.total_procs, matching, largest)
    per_node, count = job.procs_per_node or 1, job.nodes or 1
    big_enough = sum(1 for n in matching if n.slots >= per_node)
    if count <= big_enough:
        return None
    if big_enough == 0:
        return f"requested {per_node} slots per node; the largest matching node has {largest}"
    return (
        f"requested {count} nodes with {per_node} slots each; only {big_enough} matching "
        f"node(s) have that many (the largest has {largest})"
    )


def backend_hint(nodes: Sequence[NodeView]) -> str:
    """Why a backend's nodes did not count: they take only jobs that name their pool."""
    pools = sorted({n.labels[POOL_LABEL] for n in nodes if not matches_backend(n.labels, {})})
    if not pools:
        return ""
    named = ", ".join(f"pool: {p}" for p in pools)
    return f" (a compute backend's nodes take only jobs whose resources.selector names {named})"


def _total_refusal(wanted: int, matching: Sequence[NodeView], largest: int) -> str | None:
    total = sum(n.slots for n in matching)
    if wanted <= total:
        return None
    return (
        f"requested {wanted} slots in total; all {len(matching)} matching node(s) together "
        f"have {total} (the largest has {largest})"
    )


def job_request_of(
    spec: JobSpec | Mapping[str, Any], job_id: str = "", priority: int = 1, restart: bool = False
) -> JobRequest:
    """The request of a job's next attempt; only a `restart` may shrink to procs_min (its
    first attempt runs its shape, or waits for it)."""
    resolved: Mapping[str, Any] = (
        spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec
    )
    resources = resolved["resources"]
    return JobRequest(
        id=job_id,
        project=resolved["project"],
        priority=priority,
        nodes=resources.get("nodes"),
        procs_per_node=resources.get("procs_per_node"),
        total_procs=resources.get("procs"),
        accelerator=resources.get("accelerator", "any"),
        gpu_type=resources.get("gpu_type"),
        min_gpu_memory_mb=resources.get("min_gpu_memory_mb"),
        selector=dict(resources.get("selector") or {}),
        min_procs=resources.get("procs_min") if restart else None,
    )


class NodeColumns(Protocol):
    """A node row: the ORM object, or just its columns."""

    id: str
    accelerator: str
    gpu_model: str | None
    gpu_memory_mb: int | None
    memory_mb: int | None
    labels: Mapping[str, Any] | None
    slots: int
    state: str
    last_heartbeat_at: datetime


def heartbeat_age_s(last_heartbeat_at: datetime, now: datetime) -> float:
    return (now - last_heartbeat_at).total_seconds()


def is_alive(last_heartbeat_at: datetime, now: datetime, timeout_s: float) -> bool:
    """A node is alive while its last heartbeat is at most the node timeout old: what
    placement places on, and what the nodes listing and `ampfleet_node_up` say."""
    return heartbeat_age_s(last_heartbeat_at, now) <= timeout_s


def silent_before(
    now: datetime, timeout_s: float, watched_since: datetime | None
) -> datetime | None:
    """The other half of the liveness rule, the one that restarts work: a node is lost
    (its attempts go elsewhere) when its last heartbeat is older than this; likewise a start
    nobody claimed since before it (with the start timeout). Silence counts only while the
    judge could see it: `watched_since` is when the scheduler last regained the database
    after failing to reach it (None: it never lost it). During its own outage the nodes
    could not write their heartbeats either, so after one every node gets a whole timeout
    from then. None: nothing can have been silent that long yet."""
    cutoff = now - timedelta(seconds=timeout_s)
    if watched_since is not None and watched_since > cutoff:
        return None
    return cutoff


def node_view(
    node: NodeColumns | Node,
    used: int = 0,
    *,
    now: datetime | None = None,
    timeout_s: float | None = None,
) -> NodeView:
    alive = True
    if now is not None and timeout_s is not None:
        alive = is_alive(node.last_heartbeat_at, now, timeout_s)
    return NodeView(
        id=node.id,
        accelerator=node.accelerator,
        gpu_model=node.gpu_model,
        gpu_memory_mb=node.gpu_memory_mb,
        labels={str(k): str(v) for k, v in (node.labels or {}).items()},
        slots=node.slots,
        free=max(node.slots - used, 0),
        schedulable=alive and node.state == "ready",
        memory_mb=node.memory_mb,
    )
