"""Placement by example: shapes, constraints, order, quotas, reservations, preemption, reasons."""

from __future__ import annotations

from typing import Any

from ampfleet.scheduler.placement import ProjectPolicy, fits_fleet, queue_order
from tests.support.placement import NOW, job, node, placed, run, running

# -- shapes -------------------------------------------------------------------------------


def test_gang_gets_all_nodes_or_none() -> None:
    nodes = [node("a", 2, slots=4), node("b", 2, slots=4), node("c", 1, slots=4)]
    decision = run([job("j1", nodes=3, procs=2)], nodes)
    assert decision.placements == []
    assert "waiting for capacity: needs 3 x 2 slots" in decision.pending["j1"].reason
    decision = run([job("j1", nodes=3, procs=2)], [node("a", 2), node("b", 2)])
    assert decision.pending["j1"].reason.startswith("no node matches: requested 3 nodes")
    decision = run([job("j1", nodes=2, procs=2)], [node("a", 2), node("b", 2)])
    assert placed(decision) == {"j1": (("a", 2), ("b", 2))}


def test_best_fit_prefers_the_fullest_node_then_node_id() -> None:
    nodes = [node("big", 8), node("small-b", 2), node("small-a", 2)]
    assert placed(run([job("j1", procs=2)], nodes)) == {"j1": (("small-a", 2),)}


def test_total_prefers_one_node_that_fits_best() -> None:
    nodes = [node("a", 8), node("b", 5), node("c", 4)]
    assert placed(run([job("j", total=5)], nodes)) == {"j": (("b", 5),)}


def test_total_packs_onto_the_fewest_nodes_largest_first() -> None:
    nodes = [node("a", 2), node("b", 6), node("c", 3), node("d", 5)]
    # 10 slots: no single node has them; the largest (6) plus 4 on the node they fit best.
    assert placed(run([job("j", total=10)], nodes)) == {"j": (("b", 6), ("d", 4))}
    # 7 slots: 6 on `b`, the remainder 1 goes to the node it fills best (`a`, 2 free).
    assert placed(run([job("j", total=7)], nodes)) == {"j": (("b", 6), ("a", 1))}


def test_never_overcommits_a_node_within_one_pass() -> None:
    jobs = [job("j1", procs=3), job("j2", procs=3), job("j3", total=3)]
    decision = run(jobs, [node("a", 4, slots=8), node("b", 2)])
    assert placed(decision) == {"j1": (("a", 3),), "j3": (("b", 2), ("a", 1))}
    assert list(decision.pending) == ["j2"]


# -- constraints ----------------------------------------------------------------------------


def test_constraints_accelerator_gpu_type_memory_and_labels() -> None:
    nodes = [
        node("cpu", 8, pool="cpu"),
        node("h200", 8, accelerator="cuda", gpu_model="NVIDIA H200", gpu_memory_mb=141_000),
        node("a100", 8, accelerator="cuda", gpu_model="NVIDIA A100", gpu_memory_mb=40_000,
             pool="a100", zone="eu-1"),
    ]  # fmt: skip

    def where(**constraints: Any) -> tuple[tuple[str, int], ...] | None:
        return placed(run([job("j", **constraints)], nodes)).get("j")

    assert where(accelerator="cpu") == (("cpu", 1),)
    assert where(gpu_type="h200") == (("h200", 1),)
    assert where(gpu_type="a100", selector={"zone": "eu-1"}) == (("a100", 1),)
    assert where(min_gpu_memory_mb=80_000) == (("h200", 1),)
    assert where(accelerator="cuda", selector={"pool": "a100"}) == (("a100", 1),)
    assert where(gpu_type="L4") is None
    assert where(accelerator="cpu", selector={"pool": "a100"}) is None


def test_unschedulable_nodes_get_nothing() -> None:
    nodes = [node("cordoned", 8, schedulable=False), node("ok", 1)]
    decision = run([job("j1", procs=2), job("j2")], nodes)
    assert placed(decision) == {"j2": (("ok", 1),)}
    reason = decision.pending["j1"].reason
    assert reason.startswith("no node matches: requested 2 slots per node")
    assert "1 matching node(s) are cordoned or down" in reason


# -- order and fair share -------------------------------------------------------------------


def test_priority_then_fifo() -> None:
    jobs = [job("j1", procs=2), job("j2", procs=2, priority=2), job("j3", procs=2)]
    decision = run(jobs, [node("a", 4)])
    assert [p.job_id for p in decision.placements] == ["j2", "j1"]
    assert decision.pending["j3"].position == 1


def test_queue_order_is_priority_then_weighted_share_then_fifo() -> None:
    jobs = [
        job("j1", project="heavy"),
        job("j2", project="light"),
        job("j3", project="heavy", priority=2),
        job("j4", project="weighted"),
    ]
    usage = {"heavy": 100.0, "light": 10.0, "weighted": 150.0}
    policies = {"weighted": ProjectPolicy(weight=3.0)}  # 150 / 3 = 50: between the two
    order = [j.id for j in queue_order(jobs, usage, policies)]
    assert order == ["j3", "j2", "j4", "j1"]


def test_projects_that_start_level_take_turns_within_a_pass() -> None:
    jobs = [job(f"a{i}", project="a") for i in range(4)]
    jobs += [job(f"b{i}", project="b") for i in range(4)]
    decision = run(jobs, [node("n", 4)])
    assert sorted(p.job_id for p in decision.placements) == ["a0", "a1", "b0", "b1"]


def test_in_pass_charge_respects_weights() -> None:
    jobs = [job(f"a{i}", project="a") for i in range(8)]
    jobs += [job(f"b{i}", project="b") for i in range(8)]
    policies = {"b": ProjectPolicy(weight=3.0)}
    decision = run(jobs, [node("n", 8)], policies=policies)
    projects = [p.job_id[0] for p in decision.placements]
    assert projects.count("a") == 2
    assert projects.count("b") == 6


# -- quotas ------------------------------------------------------------------------------------


def test_quota_blocks_only_its_own_project() -> None:
    policies = {"capped": ProjectPolicy(max_slots=4)}
    active = [running("r1", {"busy": 3}, project="capped")]
    jobs = [job("j1", procs=2, project="capped", priority=2), job("j2", procs=2, project="free")]
    decision = run(jobs, [node("a", 8), node("busy", 0, slots=3)], active, policies=policies)
    assert placed(decision) == {"j2": (("a", 2),)}
    assert decision.pending["j1"].reason == "project capped is at its quota of 4 slots (holds 3)"


def test_quota_counts_what_this_pass_placed() -> None:
    policies = {"capped": ProjectPolicy(max_slots=3)}
    jobs = [job(f"j{i}", project="capped") for i in range(5)]
    decision = run(jobs, [node("a", 8)], policies=policies)
    assert len(decision.placements) == 3
    assert decision.pending["j3"].reason.endswith("(holds 3)")


# -- reservations and backfill --------------------------------------------------------------


def test_reservation_holds_slots_and_backfill_uses_the_rest() -> None:
    nodes = [node("a", 4, slots=8), node("b", 2, slots=8)]
    active = [
        running("ends-soon", {"a": 4}, end=NOW + 50),
        running("ends-never", {"b": 6}),
    ]
    jobs = [
        job("big", procs=8, priority=2),
        job("small", procs=2),  # fits on b now without touching what `big` needs on a
        job("medium", procs=4),  # only fits on a: the slots `big` is holding
    ]
    decision = run(jobs, nodes, active, allow_preemption=False)
    assert placed(decision) == {"small": (("b", 2),)}
    big = decision.pending["big"]
    assert big.estimated_start == NOW + 50
    assert "reserved, to start in about 50s" in big.reason
    assert decision.reserved == {"big": (("a", 4),)}
    assert decision.pending["medium"].reason.startswith("behind 1 higher-priority job(s)")
    assert "big" in decision.pending["medium"].reason


def test_reservation_without_estimates_holds_nothing() -> None:
    nodes = [node("a", 4, slots=8)]
    active = [running("r", {"a": 4})]
    decision = run([job("big", procs=8), job("small", procs=4)], nodes, active)
    assert placed(decision) == {"small": (("a", 4),)}
    assert decision.pending["big"].estimated_start is None
    assert "no running job reports an end" in decision.pending["big"].reason
    assert decision.reserved == {}


def test_only_the_first_waiting_job_reserves() -> None:
    nodes = [node("a", 0, slots=8), node("b", 0, slots=8)]
    active = [running("ra", {"a": 8}, end=NOW + 10), running("rb", {"b": 8}, end=NOW + 20)]
    jobs = [job("first", procs=8), job("second", procs=8)]
    decision = run(jobs, nodes, active, allow_preemption=False)
    assert decision.pending["first"].estimated_start == NOW + 10
    assert decision.pending["second"].estimated_start is None
    assert decision.pending["second"].reason.startswith("waiting for capacity")


# -- preemption -------------------------------------------------------------------------------


def test_preemption_picks_fewest_victims_lowest_priority_latest_start() -> None:
    nodes = [node("a", 0, slots=8), node("b", 0, slots=8)]
    active = [
        running("old-low", {"a": 4}, priority=0, started=NOW - 500),
        running("new-low", {"a": 4}, priority=0, started=NOW - 10),
        running("normal", {"b": 8}, priority=1),
    ]
    decision = run([job("urgent", procs=4, priority=2)], nodes, active)
    assert [(p.victim_id, p.for_job_id) for p in decision.preemptions] == [("new-low", "urgent")]
    assert decision.placements == []
    reason = decision.pending["urgent"].reason
    assert reason.startswith("waiting for 1 lower-priority job(s) to be preempted")
    # Fewest wins over preference: one 8-slot victim beats two 4-slot ones.
    decision = run([job("urgent", procs=8, priority=2)], nodes, active)
    assert [p.victim_id for p in decision.preemptions] == ["normal"]


def test_preemption_drops_victims_that_a_later_choice_made_unneeded() -> None:
    # 1 x 4 slots. By preference: `recent` (1 slot on b), then `wide` (3 on a and 3 on b),
    # which makes b fit: two victims. By size: `wide`, then `oldest` (4 on a), after which
    # `wide` is not needed any more: one victim, so that is the choice.
    nodes = [node("a", 0, slots=8), node("b", 0, slots=8)]
    active = [
        running("keep", {"a": 1, "b": 4}, priority=2),
        running("recent", {"b": 1}, priority=0, started=NOW - 1),
        running("wide", {"a": 3, "b": 3}, priority=0, started=NOW - 50),
        running("oldest", {"a": 4}, priority=0, started=NOW - 99),
    ]
    decision = run([job("urgent", procs=4, priority=2)], nodes, active)
    assert [p.victim_id for p in decision.preemptions] == ["oldest"]
    assert decision.reserved == {"urgent": ()}


def test_the_next_pass_waits_for_the_same_victim_instead_of_taking_another() -> None:
    nodes = [node("a", 0, slots=8), node("b", 0, slots=8)]
    urgent = job("urgent", procs=8, priority=2)
    first = run([urgent], nodes, [running("v", {"a": 8}, priority=0, started=NOW - 50)])
    assert [p.victim_id for p in first.preemptions] == ["v"]
    # Next pass: `v` is still checkpointing, and `newer` started since; it would be the
    # preferred victim, but the room `v` leaves is enough.
    active = [
        running("v", {"a": 8}, priority=0, started=NOW - 50, preempting=True),
        running("newer", {"b": 8}, priority=0, started=NOW - 1),
    ]
    second = run([urgent], nodes, active)
    assert second.preemptions == []
    assert second.pending["urgent"].reason == (
        "waiting for 1 preempted job(s) to exit: 1 of other projects"
    )
    assert second.reserved == {"urgent": ()}


def test_never_preempts_equal_or_higher_priority() -> None:
    nodes = [node("a", 0, slots=8)]
    active = [running("same", {"a": 4}, priority=1), running("higher", {"a": 4}, priority=2)]
    decision = run([job("j", procs=4, priority=1)], nodes, active)
    assert decision.preemptions == []


def test_preemption_can_be_turned_off() -> None:
    nodes = [node("a", 0, slots=8)]
    active = [running("low", {"a": 8}, priority=0)]
    decision = run([job("j", procs=4, priority=2)], nodes, active, allow_preemption=False)
    assert decision.preemptions == []


def test_no_preemption_for_a_job_over_its_quota() -> None:
    nodes = [node("a", 0, slots=8)]
    active = [running("low", {"a": 8}, priority=0)]
    policies = {"p": ProjectPolicy(max_slots=2)}
    decision = run([job("j", procs=4, priority=2)], nodes, active, policies=policies)
    assert decision.preemptions == []
    assert "quota" in decision.pending["j"].reason


def test_a_victim_is_taken_once_and_its_preemptor_keeps_the_free_slots() -> None:
    nodes = [node("a", 2, slots=8)]
    active = [running("low", {"a": 6}, priority=0)]
    jobs = [job("j1", procs=8, priority=2), job("j2", procs=6, priority=2), job("j3", procs=1)]
    decision = run(jobs, nodes, active)
    assert [(p.victim_id, p.for_job_id) for p in decision.preemptions] == [("low", "j1")]
    assert decision.reserved == {"j1": (("a", 2),)}
    assert decision.placements == []  # j3 would have taken a slot that j1 needs
    assert decision.pending["j3"].reason.startswith("behind 1 higher-priority job(s)")


def test_reasons_name_only_the_viewers_own_jobs() -> None:
    """Another project's job ids are not the viewer's to see: they are counted, not named."""
    nodes = [node("a", 0, slots=8), node("b", 2, slots=8)]
    active = [
        running("theirs-low", {"a": 4}, priority=0, project="q", started=NOW - 1),
        running("mine-low", {"a": 4}, priority=0, project="p", started=NOW - 2),
    ]
    decision = run([job("urgent", procs=8, priority=2, project="p")], nodes, active)
    reason = decision.pending["urgent"].reason
    assert reason == (
        "waiting for 2 lower-priority job(s) to be preempted: mine-low, 1 of other projects"
    )
    jobs = [job("big", procs=8, priority=2, project="q"), job("mine", procs=2, project="p")]
    decision = run(jobs, [node("a", 2, slots=8)], [running("r", {"a": 6}, end=NOW + 5)])
    reason = decision.pending["mine"].reason
    assert reason.startswith("behind 1 higher-priority job(s)"), reason
    assert "big" not in reason
    assert "preemption: 1 of other projects" in reason


# -- positions, reasons and admission -------------------------------------------------------


def test_positions_count_pending_jobs_in_queue_order() -> None:
    jobs = [job("j1", procs=4), job("j2", procs=1), job("j3", procs=4, priority=2), job("j4")]
    decision = run(jobs, [node("a", 4), node("tiny", 1)])
    assert placed(decision) == {"j3": (("a", 4),), "j2": (("tiny", 1),)}
    assert {k: p.position for k, p in decision.pending.items()} == {"j1": 1, "j4": 2}


def test_waiting_reason_names_the_request_and_what_is_free() -> None:
    nodes = [node("g", 2, slots=8, accelerator="cuda", gpu_model="A100", pool="a100")]
    jobs = [job("j", nodes=1, procs=4, accelerator="cuda", gpu_type="a100",
                selector={"pool": "a100"})]  # fmt: skip
    reason = run(jobs, nodes).pending["j"].reason
    assert reason.startswith("waiting for capacity: needs 1 x 4 slots of cuda, gpu_type=a100")
    assert "pool=a100" in reason
    assert "free now: 0 matching node(s) with >= 4 free slots, 2 free slots" in reason


def test_no_node_matches() -> None:
    decision = run([job("j", gpu_type="tpu")], [node("a", 8)])
    assert decision.pending["j"].reason.startswith("no node matches")
    assert decision.pending["j"].estimated_start is None


def test_fits_fleet_ignores_current_use_and_cordons() -> None:
    nodes = [node("a", 0, slots=8, schedulable=False), node("b", 8)]
    assert fits_fleet(job("j", nodes=2, procs=8), nodes) is None
    assert fits_fleet(job("j", total=16), nodes) is None
    too_wide = fits_fleet(job("j", procs=16), nodes)
    assert too_wide is not None
    assert "requested 16 slots per node; the largest matching node has 8" in too_wide
    too_many = fits_fleet(job("j", total=17), nodes)
    assert too_many is not None
    assert "requested 17 slots" in too_many
    assert "the largest has 8" in too_many
    assert fits_fleet(job("j", gpu_type="a100"), nodes) is not None


def test_same_input_same_decision() -> None:
    nodes = [node(f"n{i}", i % 5, slots=4) for i in range(10)]
    jobs = [job(f"j{i:02d}", total=1 + i % 6, project=f"p{i % 3}") for i in range(30)]
    assert run(jobs, nodes) == run(list(reversed(jobs)), list(reversed(nodes)))
