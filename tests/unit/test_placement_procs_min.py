"""resources.procs_min: a restart whose shape is not free runs on the ranks that are, down to
its procs_min, packed onto the fewest nodes; a first attempt, or a restart without it,
runs its shape or waits."""

from __future__ import annotations

from dataclasses import replace

from ampfleet.core.fleet import job_request_of
from ampfleet.core.spec import JobSpec
from ampfleet.scheduler.placement import JobRequest, ProjectPolicy
from tests.support.placement import job, node, placed, run, running


def restart(job_id: str, min_procs: int, **shape: int) -> JobRequest:
    return replace(job(job_id, **shape), min_procs=min_procs)


def test_a_restart_runs_on_the_free_ranks_down_to_procs_min() -> None:
    nodes = [node("a", 3, slots=4), node("b", 0, slots=4)]
    decision = run([restart("j", 2, nodes=2, procs=4)], nodes)
    assert placed(decision) == {"j": (("a", 3),)}
    assert decision.placements[0].shape == 8


def test_it_packs_the_fewer_ranks_onto_the_fewest_nodes() -> None:
    nodes = [node("a", 1, slots=4), node("b", 3, slots=4), node("c", 2, slots=4)]
    decision = run([restart("j", 4, total=8)], nodes)
    assert placed(decision) == {"j": (("b", 3), ("c", 2), ("a", 1))}


def test_a_free_shape_is_taken_whole() -> None:
    decision = run([restart("j", 1, total=4)], [node("a", 8)])
    assert placed(decision) == {"j": (("a", 4),)}
    assert decision.placements[0].shape is None


def test_fewer_free_ranks_than_procs_min_wait() -> None:
    decision = run([restart("j", 3, total=4)], [node("a", 2, slots=4)])
    assert decision.placements == []
    assert "waiting for capacity" in decision.pending["j"].reason


def test_without_procs_min_the_shape_waits() -> None:
    decision = run([job("j", total=4)], [node("a", 2, slots=4)])
    assert decision.placements == []


def test_a_fleet_that_lost_a_node_still_runs_the_restart() -> None:
    # Two nodes' shape, one node left: the whole shape could never fit again.
    decision = run([restart("j", 2, nodes=2, procs=2)], [node("a", 2)])
    assert placed(decision) == {"j": (("a", 2),)}
    decision = run([job("j", nodes=2, procs=2)], [node("a", 2)])
    assert decision.pending["j"].reason.startswith("no node matches")


def test_fewer_ranks_come_before_preempting_a_lower_priority_job() -> None:
    nodes = [node("a", 2, slots=4)]
    low = running("low", {"a": 2}, priority=0)
    decision = run([replace(restart("j", 2, total=4), priority=2)], nodes, [low])
    assert placed(decision) == {"j": (("a", 2),)}
    assert decision.preemptions == []


def test_the_project_holds_the_ranks_placed_not_the_shape() -> None:
    nodes = [node("cpu", 3, slots=4), node("gpu", 2, accelerator="cuda")]
    shrinking = replace(job("j", total=4, accelerator="cpu"), min_procs=2)
    policies = {"p": ProjectPolicy(max_slots=5)}
    decision = run([shrinking, job("k", total=2, accelerator="cuda")], nodes, policies=policies)
    # j holds 3 (not 4) of the project's 5: k fits beside it.
    assert placed(decision) == {"j": (("cpu", 3),), "k": (("gpu", 2),)}


def test_only_a_restart_carries_procs_min_into_its_request() -> None:
    spec = JobSpec.model_validate({"recipe": "digits", "resources": {"procs": 4, "procs_min": 2}})
    assert job_request_of(spec).min_procs is None
    assert job_request_of(spec, restart=True).min_procs == 2
