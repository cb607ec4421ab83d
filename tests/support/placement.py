"""Inputs of the placement pass (ampfleet/scheduler/placement.py) as plain values, for the
tests that decide by example: jobs, nodes and running jobs with short defaults, one pass at a
fixed clock (NOW), and what the pass placed, by job."""

from __future__ import annotations

from typing import Any

from ampfleet.scheduler.placement import Decision, JobRequest, NodeView, RunningJob, schedule

NOW = 1_000_000.0


def job(
    job_id: str,
    *,
    nodes: int | None = None,
    procs: int | None = None,
    total: int | None = None,
    priority: int = 1,
    project: str = "p",
    **constraints: Any,
) -> JobRequest:
    if total is None:
        nodes, procs = nodes or 1, procs or 1
    return JobRequest(
        id=job_id,
        project=project,
        priority=priority,
        nodes=nodes,
        procs_per_node=procs,
        total_procs=total,
        **constraints,
    )


def node(
    node_id: str,
    free: int,
    *,
    slots: int | None = None,
    accelerator: str = "cpu",
    gpu_model: str | None = None,
    gpu_memory_mb: int | None = None,
    schedulable: bool = True,
    **labels: str,
) -> NodeView:
    return NodeView(
        id=node_id,
        accelerator=accelerator,
        gpu_model=gpu_model,
        gpu_memory_mb=gpu_memory_mb,
        labels=labels,
        slots=free if slots is None else slots,
        free=free,
        schedulable=schedulable,
    )


def running(
    job_id: str,
    allocations: dict[str, int],
    *,
    priority: int = 1,
    project: str = "other",
    end: float | None = None,
    started: float = NOW - 100,
    preempting: bool = False,
) -> RunningJob:
    return RunningJob(job_id, project, priority, allocations, end, started, preempting)


def run(
    jobs: list[JobRequest],
    nodes: list[NodeView],
    active: list[RunningJob] | None = None,
    **kwargs: Any,
) -> Decision:
    kwargs.setdefault("usage", {})
    kwargs.setdefault("policies", {})
    return schedule(jobs, nodes, active or [], now=NOW, **kwargs)


def placed(decision: Decision) -> dict[str, tuple[tuple[str, int], ...]]:
    return {p.job_id: p.allocations for p in decision.placements}
