from __future__ import annotations

from ampfleet.scheduler.placement import NodeCapacity, PendingJob, place


def job(job_id: str, *, nodes: int = 1, procs: int = 1, priority: int = 1, **kw) -> PendingJob:
    return PendingJob(
        id=job_id,
        priority=priority,
        nodes=nodes,
        procs_per_node=procs,
        accelerator=kw.get("accelerator", "any"),
        gpu_type=kw.get("gpu_type"),
    )


def node(node_id: str, free: int, accelerator: str = "cpu", gpu_model: str | None = None):
    return NodeCapacity(id=node_id, accelerator=accelerator, gpu_model=gpu_model, free=free)


def test_gang_gets_all_nodes_or_none() -> None:
    placements = place([job("j1", nodes=3, procs=2)], [node("a", 2), node("b", 2)])
    assert placements == []
    placements = place([job("j1", nodes=2, procs=2)], [node("a", 2), node("b", 2)])
    assert [p.node_ids for p in placements] == [("a", "b")]


def test_best_fit_prefers_the_fullest_node() -> None:
    placements = place([job("j1", procs=2)], [node("big", 8), node("small", 2)])
    assert placements[0].node_ids == ("small",)


def test_priority_then_fifo_and_no_overcommit() -> None:
    jobs = [job("j1", procs=2), job("j2", procs=2, priority=2), job("j3", procs=2)]
    placements = place(jobs, [node("a", 4)])
    assert [p.job_id for p in placements] == ["j2", "j1"]


def test_constraints() -> None:
    nodes = [node("cpu", 8), node("gpu", 8, accelerator="cuda", gpu_model="NVIDIA H200")]
    assert place([job("j", accelerator="cuda")], nodes)[0].node_ids == ("gpu",)
    assert place([job("j", gpu_type="h200")], nodes)[0].node_ids == ("gpu",)
    assert place([job("j", gpu_type="A100")], nodes) == []
    assert place([job("j", accelerator="cpu")], nodes)[0].node_ids == ("cpu",)
