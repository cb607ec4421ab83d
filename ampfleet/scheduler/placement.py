"""Placement as a pure function: pending jobs + free capacity -> decisions.

Gang placement: a job gets all of its nodes at once or none. Among the nodes that fit,
the fullest ones are taken first (best fit), which keeps large holes free for large jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PendingJob:
    id: str
    priority: int
    nodes: int
    procs_per_node: int
    accelerator: str  # any | cuda | cpu
    gpu_type: str | None = None


@dataclass(frozen=True)
class NodeCapacity:
    id: str
    accelerator: str  # cuda | cpu
    gpu_model: str | None
    free: int


@dataclass(frozen=True)
class Placement:
    job_id: str
    node_ids: tuple[str, ...]
    """One per node rank, in node-rank order."""
    procs_per_node: int


def queue_order(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    """Higher priority first, then first come first served (ids are time-ordered)."""
    return sorted(jobs, key=lambda j: (-j.priority, j.id))


def fits(job: PendingJob, node: NodeCapacity) -> bool:
    if job.accelerator not in ("any", node.accelerator):
        return False
    if not job.gpu_type:
        return True
    return node.gpu_model is not None and job.gpu_type.lower() in node.gpu_model.lower()


def place(jobs: Sequence[PendingJob], nodes: Sequence[NodeCapacity]) -> list[Placement]:
    free = {node.id: node.free for node in nodes}
    placements = []
    for job in queue_order(jobs):
        candidates = [n for n in nodes if fits(job, n) and free[n.id] >= job.procs_per_node]
        if len(candidates) < job.nodes:
            continue
        chosen = sorted(candidates, key=lambda n: (free[n.id] - job.procs_per_node, n.id))
        chosen = chosen[: job.nodes]
        for node in chosen:
            free[node.id] -= job.procs_per_node
        placements.append(Placement(job.id, tuple(n.id for n in chosen), job.procs_per_node))
    return placements
