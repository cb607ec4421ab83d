"""Topology: a job on more than one node goes within one rack, else one zone, when a single
one can hold it; across only otherwise; and its placement says which."""

from __future__ import annotations

from ampfleet.scheduler.placement import Decision
from ampfleet.scheduler.topology import TOPOLOGY_LABELS
from tests.support.placement import job, node, placed, run


def topology(decision: Decision) -> dict[str, str | None]:
    return {p.job_id: p.topology for p in decision.placements}


def test_the_labels_are_rack_then_zone() -> None:
    assert TOPOLOGY_LABELS == ("rack", "zone")


def test_a_two_node_job_stays_in_the_rack_that_can_hold_it() -> None:
    # Node id order alone would take a and b, one in each rack.
    nodes = [node("a", 2, rack="r1"), node("b", 2, rack="r2"), node("c", 2, rack="r1")]
    decision = run([job("j", nodes=2, procs=2)], nodes)
    assert placed(decision) == {"j": (("a", 2), ("c", 2))}
    assert topology(decision) == {"j": "in rack r1"}


def test_a_total_is_packed_within_one_rack() -> None:
    nodes = [node("a", 4, rack="r1"), node("b", 4, rack="r2"), node("c", 2, rack="r1")]
    decision = run([job("j", total=6)], nodes)
    assert placed(decision) == {"j": (("a", 4), ("c", 2))}
    assert topology(decision) == {"j": "in rack r1"}


def test_across_racks_only_when_no_single_rack_can_hold_it() -> None:
    nodes = [node("a", 2, rack="r1"), node("b", 2, rack="r2"), node("c", 1, rack="r1")]
    decision = run([job("j", nodes=2, procs=2)], nodes)
    assert placed(decision) == {"j": (("a", 2), ("b", 2))}
    assert topology(decision) == {
        "j": "across racks r1, r2 (no single rack had room for 2 x 2 slots)"
    }


def test_within_one_zone_when_no_rack_can_hold_it() -> None:
    nodes = [
        node("a", 4, rack="r1", zone="eu"),
        node("b", 4, rack="r2", zone="us"),
        node("c", 4, rack="r3", zone="eu"),
    ]
    decision = run([job("j", total=8)], nodes)
    assert placed(decision) == {"j": (("a", 4), ("c", 4))}
    assert topology(decision) == {"j": "in zone eu (no single rack had room for 8 slots)"}
    across = run([job("j", total=12)], nodes)
    assert topology(across) == {
        "j": "across racks r1, r2, r3 (no single rack or zone had room for 12 slots)"
    }


def test_zone_when_the_nodes_carry_no_rack_label() -> None:
    nodes = [node("a", 2, zone="eu"), node("b", 2, zone="us"), node("c", 2, zone="eu")]
    decision = run([job("j", nodes=2, procs=2)], nodes)
    assert placed(decision) == {"j": (("a", 2), ("c", 2))}
    assert topology(decision) == {"j": "in zone eu"}


def test_without_topology_labels_placement_is_as_before() -> None:
    nodes = [node("a", 2, pool="x"), node("b", 2, pool="y"), node("c", 2, pool="x")]
    decision = run([job("j", nodes=2, procs=2)], nodes)
    assert placed(decision) == {"j": (("a", 2), ("b", 2))}
    assert topology(decision) == {"j": None}


def test_nodes_without_the_label_are_in_no_rack() -> None:
    # a and b have no rack: they are not one rack, and a rack that can hold the job wins.
    nodes = [node("a", 2), node("b", 2), node("c", 2, rack="r1"), node("d", 2, rack="r1")]
    decision = run([job("j", nodes=2, procs=2)], nodes)
    assert placed(decision) == {"j": (("c", 2), ("d", 2))}
    lonely = run([job("j", nodes=2, procs=2)], [node("a", 2), node("b", 2, rack="r1")])
    assert placed(lonely) == {"j": (("a", 2), ("b", 2))}
    assert topology(lonely) == {
        "j": "across rack r1 and 1 node(s) without a rack label "
        "(no single rack had room for 2 x 2 slots)"
    }


def test_a_job_that_fits_one_node_is_placed_as_before() -> None:
    nodes = [node("a", 4, rack="r1"), node("b", 2, rack="r2"), node("c", 2, rack="r1")]
    decision = run([job("fixed", procs=2), job("total", total=2)], nodes)
    assert placed(decision) == {"fixed": (("b", 2),), "total": (("c", 2),)}
    assert topology(decision) == {"fixed": None, "total": None}


def test_the_best_fitting_rack_wins_over_the_first_one() -> None:
    # Best fit over all nodes would take a1 and b1 (1 slot left over, two racks); r1
    # leaves 4 over, r2 leaves 2.
    roomy = [node("a1", 4, rack="r1"), node("a2", 8, rack="r1")]
    tight = [node("b1", 5, rack="r2"), node("b2", 5, rack="r2")]
    decision = run([job("j", nodes=2, procs=4)], roomy + tight)
    assert placed(decision) == {"j": (("b1", 4), ("b2", 4))}


def test_fewest_nodes_come_before_least_left_over() -> None:
    three = [node("a1", 3, rack="r1"), node("a2", 3, rack="r1"), node("a3", 2, rack="r1")]
    two = [node("b1", 5, rack="r2"), node("b2", 5, rack="r2")]
    decision = run([job("j", total=8)], three + two)
    assert placed(decision) == {"j": (("b1", 5), ("b2", 3))}


def test_a_tie_goes_to_the_rack_with_the_lowest_node_id() -> None:
    nodes = [
        node("a", 2, rack="r2"),
        node("b", 2, rack="r1"),
        node("c", 2, rack="r2"),
        node("d", 2, rack="r1"),
    ]
    decision = run([job("j", nodes=2, procs=2)], nodes)
    assert topology(decision) == {"j": "in rack r2"}
    shuffled = run([job("j", nodes=2, procs=2)], list(reversed(nodes)))
    assert placed(shuffled) == placed(decision) == {"j": (("a", 2), ("c", 2))}


def test_a_selector_still_constrains() -> None:
    nodes = [node("a", 2, rack="r1"), node("b", 2, rack="r1"), node("c", 2, rack="r2")]
    chosen = run([job("j", nodes=2, procs=2, selector={"rack": "r2"})], nodes)
    assert chosen.placements == []
    assert "only 1 matching node(s)" in chosen.pending["j"].reason
    nodes.append(node("d", 2, rack="r2"))
    chosen = run([job("j", nodes=2, procs=2, selector={"rack": "r2"})], nodes)
    assert placed(chosen) == {"j": (("c", 2), ("d", 2))}
    assert topology(chosen) == {"j": "in rack r2"}


def test_slots_placed_earlier_in_the_pass_are_gone_from_their_rack() -> None:
    nodes = [node(f"n{i}", 2, rack=f"r{i % 2}") for i in range(6)]
    jobs = [job(name, nodes=2, procs=2) for name in ("first", "second", "third")]
    decision = run(jobs, nodes)
    assert placed(decision) == {
        "first": (("n0", 2), ("n2", 2)),
        "second": (("n1", 2), ("n3", 2)),
        "third": (("n4", 2), ("n5", 2)),
    }
    assert topology(decision)["third"] == (
        "across racks r0, r1 (no single rack had room for 2 x 2 slots)"
    )
