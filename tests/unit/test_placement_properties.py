"""Placement invariants over generated fleets, queues and running jobs (hypothesis).

Every generated pass is checked against the same list of invariants (`check`); each test then
varies what the generator stresses. Feasibility is recomputed here from first principles
(`fits`, `matches`), not with the engine's index, so the two implementations check each other.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ampfleet.scheduler.placement import (
    Decision,
    JobRequest,
    NodeView,
    ProjectPolicy,
    RunningJob,
    schedule,
)

NOW = 10_000.0
PROJECTS = ("alpha", "beta", "gamma")
MODELS = {"cuda": ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"), "cpu": (None,)}
MEMORY = {"NVIDIA A100-SXM4-40GB": 40_960, "NVIDIA H100 80GB HBM3": 81_559}
QUICK = settings(max_examples=300, deadline=None)


@dataclass
class World:
    jobs: list[JobRequest]
    nodes: list[NodeView]
    running: list[RunningJob]
    usage: dict[str, float]
    policies: dict[str, ProjectPolicy]
    allow_preemption: bool = True

    def decide(self) -> Decision:
        return schedule(
            self.jobs,
            self.nodes,
            self.running,
            self.usage,
            self.policies,
            NOW,
            allow_preemption=self.allow_preemption,
        )


# -- generators -------------------------------------------------------------------------------


@st.composite
def fleets(
    draw: st.DrawFn, max_nodes: int = 10, *, located: bool = False
) -> tuple[list[NodeView], list[RunningJob]]:
    """Nodes, and running jobs whose allocations account for every used slot; `located`:
    most nodes carry a rack and a zone label, some one of them or neither."""
    shapes = []
    locations: dict[str, dict[str, str]] = {}
    for i in range(draw(st.integers(1, max_nodes))):
        accelerator = draw(st.sampled_from(["cuda", "cuda", "cpu"]))
        model = draw(st.sampled_from(MODELS[accelerator]))
        slots = draw(st.integers(2, 8))
        shapes.append((f"n{i}", accelerator, model, slots, draw(st.sampled_from(["x", "y"]))))
        if located:
            rack = draw(st.sampled_from([None, "r1", "r2", "r2", "r3", "r3"]))
            zone = draw(st.sampled_from([None, "eu", "us", "us"]))
            locations[f"n{i}"] = {
                key: value for key, value in (("rack", rack), ("zone", zone)) if value
            }
    used = {node_id: 0 for node_id, *_ in shapes}
    running = []
    for r in range(draw(st.integers(0, 8))):
        allocations = {}
        for node_id, _, _, slots, _ in draw(st.lists(st.sampled_from(shapes), max_size=3)):
            room = slots - used[node_id]
            if room > 0 and node_id not in allocations:
                allocations[node_id] = draw(st.integers(1, room))
                used[node_id] += allocations[node_id]
        if allocations:
            end = draw(st.one_of(st.none(), st.floats(NOW - 10, NOW + 500)))
            running.append(
                RunningJob(
                    id=f"r{r}",
                    project=draw(st.sampled_from(PROJECTS)),
                    priority=draw(st.integers(0, 2)),
                    allocations=allocations,
                    estimated_end=end,
                    started=draw(st.floats(0, NOW)),
                    preempting=draw(st.integers(0, 4)) == 0,
                )
            )
    nodes = [
        NodeView(
            id=node_id,
            accelerator=accelerator,
            gpu_model=model,
            gpu_memory_mb=MEMORY.get(model or ""),
            labels={"pool": pool, **locations.get(node_id, {})},
            slots=slots,
            free=slots - used[node_id],
            schedulable=draw(st.booleans()) or draw(st.booleans()),  # 3 in 4 schedulable
        )
        for node_id, accelerator, model, slots, pool in shapes
    ]
    return nodes, running


@st.composite
def requests(draw: st.DrawFn, max_jobs: int = 14) -> list[JobRequest]:
    jobs = []
    for i in range(draw(st.integers(0, max_jobs))):
        if draw(st.booleans()):
            shape: dict[str, Any] = {
                "nodes": draw(st.sampled_from([1, 1, 2, 3])),
                "procs_per_node": draw(st.integers(1, 4)),
                "total_procs": None,
            }
        else:
            shape = {"nodes": None, "procs_per_node": None, "total_procs": draw(st.integers(1, 10))}
        jobs.append(
            JobRequest(
                id=f"j{i:03d}",
                project=draw(st.sampled_from(PROJECTS)),
                priority=draw(st.integers(0, 2)),
                accelerator=draw(st.sampled_from(["any", "any", "any", "cuda", "cpu"])),
                gpu_type=draw(st.sampled_from([None, None, None, None, "a100", "H100"])),
                min_gpu_memory_mb=draw(st.sampled_from([None, None, None, None, None, 50_000])),
                selector=draw(st.sampled_from([{}, {}, {}, {"pool": "x"}])),
                **shape,
            )
        )
    return draw(st.permutations(jobs))


@st.composite
def worlds(draw: st.DrawFn, *, quotas: bool = True, located: bool = False) -> World:
    nodes, running = draw(fleets(located=located))
    policies = {
        project: ProjectPolicy(
            weight=draw(st.sampled_from([1.0, 2.0, 3.0])),
            max_slots=draw(st.one_of(st.none(), st.integers(0, 12))) if quotas else None,
        )
        for project in PROJECTS
        if draw(st.booleans())
    }
    usage = {project: draw(st.floats(0, 1_000)) for project in PROJECTS}
    return World(draw(requests()), nodes, running, usage, policies, draw(st.booleans()))


# -- the independent model ---------------------------------------------------------------


def matches(job: JobRequest, node: NodeView) -> bool:
    gpu_type = (job.gpu_type or "").lower()
    return (
        node.schedulable
        and job.accelerator in ("any", node.accelerator)
        and (not gpu_type or gpu_type in (node.gpu_model or "").lower())
        and (job.min_gpu_memory_mb is None or (node.gpu_memory_mb or 0) >= job.min_gpu_memory_mb)
        and all(node.labels.get(k) == v for k, v in job.selector.items())
    )


def fits(job: JobRequest, free: Mapping[str, int], nodes: list[NodeView]) -> bool:
    """Whether `job` could be placed on `free` (node id -> free slots) at all."""
    room = [min(free.get(n.id, 0), n.slots) for n in nodes if matches(job, n)]
    if job.total_procs is not None:
        return sum(room) >= job.total_procs
    return sum(1 for r in room if r >= (job.procs_per_node or 1)) >= (job.nodes or 1)


def quota_blocked(world: World, decision: Decision, job_id: str) -> bool:
    return decision.pending[job_id].reason.startswith(
        f"project {jobs_by_id(world)[job_id].project}"
    )


def jobs_by_id(world: World) -> dict[str, JobRequest]:
    return {job.id: job for job in world.jobs}


def placed_per_node(decision: Decision) -> Counter[str]:
    used: Counter[str] = Counter()
    for placement in decision.placements:
        for node_id, slots in placement.allocations:
            used[node_id] += slots
    return used


def held_per_node(decision: Decision, *, except_job: str | None = None) -> Counter[str]:
    held: Counter[str] = Counter()
    for job_id, slots in decision.reserved.items():
        if job_id != except_job:
            for node_id, count in slots:
                held[node_id] += count
    return held


# -- the invariants ------------------------------------------------------------------------


def check(world: World, decision: Decision) -> None:
    """Every invariant that holds for every pass."""
    jobs = jobs_by_id(world)
    nodes = {node.id: node for node in world.nodes}
    placed = {p.job_id: p for p in decision.placements}
    assert sorted([*placed, *decision.pending]) == sorted(jobs), "each job decided exactly once"
    assert [p.position for p in decision.pending.values()] == list(
        range(1, len(decision.pending) + 1)
    )

    # Never over-commit (placements and holds together), never an unschedulable node.
    used = placed_per_node(decision) + held_per_node(decision)
    for node_id, slots in used.items():
        assert nodes[node_id].schedulable, f"{node_id} is not schedulable"
        assert slots <= nodes[node_id].free, f"{node_id} over-committed"

    # Gangs: all slots at once, the exact shape, on matching nodes.
    for job_id, placement in placed.items():
        job = jobs[job_id]
        node_ids = [node_id for node_id, _ in placement.allocations]
        shares = [slots for _, slots in placement.allocations]
        assert len(set(node_ids)) == len(node_ids)
        assert all(matches(job, nodes[node_id]) for node_id in node_ids)
        if job.total_procs is None:
            assert shares == [job.procs_per_node] * (job.nodes or 1)
        else:
            assert sum(shares) == job.total_procs
            assert min(shares) >= 1
            assert shares == sorted(shares, reverse=True), "rank 0 gets the largest share"

    # Quotas: a project that got anything this pass ends within its limit.
    holding = Counter[str]()
    for running in world.running:
        holding[running.project] += sum(running.allocations.values())
    for placement in decision.placements:
        holding[jobs[placement.job_id].project] += sum(s for _, s in placement.allocations)
    for project, policy in world.policies.items():
        got_some = any(jobs[job_id].project == project for job_id in placed)
        if policy.max_slots is not None and got_some:
            assert holding[project] <= policy.max_slots

    check_preemptions(world, decision)
    check_priority(world, decision)


def check_preemptions(world: World, decision: Decision) -> None:
    """Only strictly lower priority, each victim once, never one already being preempted,
    and the victims (with jobs already exiting, which need no new preemption) are enough."""
    jobs = jobs_by_id(world)
    victims = {job.id: job for job in world.running}
    if not world.allow_preemption:
        assert decision.preemptions == []
    assert len({p.victim_id for p in decision.preemptions}) == len(decision.preemptions)
    chosen: dict[str, list[RunningJob]] = {}
    for preemption in decision.preemptions:
        victim, job = victims[preemption.victim_id], jobs[preemption.for_job_id]
        assert victim.priority < job.priority
        assert not victim.preempting
        chosen.setdefault(job.id, []).append(victim)
    for job_id, for_it in chosen.items():
        reason = decision.pending[job_id].reason
        assert reason.startswith(f"waiting for {len(for_it)} lower-priority job(s)")
        room = Counter(dict(decision.reserved.get(job_id, ())))
        for victim in [*for_it, *(job for job in world.running if job.preempting)]:
            room.update(victim.allocations)
        assert fits(jobs[job_id], room, world.nodes), "the victims make room"


def check_priority(world: World, decision: Decision) -> None:
    """A lower-priority job L is never placed while a higher-priority job H stays pending
    (not over its quota) that would fit in the slots L took plus the slots left free at the
    end of the pass, not counting slots held for other jobs (reservations, preemptions)."""
    jobs = jobs_by_id(world)
    left = Counter({node.id: node.free for node in world.nodes if node.schedulable})
    left.subtract(placed_per_node(decision))
    for job_id in decision.pending:
        high = jobs[job_id]
        if quota_blocked(world, decision, job_id):
            continue
        free = left - held_per_node(decision, except_job=job_id)
        for placement in decision.placements:
            if jobs[placement.job_id].priority < high.priority:
                with_it = free + Counter(dict(placement.allocations))
                assert not fits(high, with_it, world.nodes), (
                    f"{placement.job_id} took room that {job_id} (higher priority) fits in"
                )


# -- tests ------------------------------------------------------------------------------------


@QUICK
@given(worlds())
def test_invariants_hold_for_any_pass(world: World) -> None:
    check(world, world.decide())


@QUICK
@given(worlds(quotas=False), st.randoms(use_true_random=False))
def test_same_input_same_decision_in_any_input_order(world: World, rng: random.Random) -> None:
    decision = world.decide()
    shuffled = replace(
        world,
        jobs=rng.sample(world.jobs, len(world.jobs)),
        nodes=rng.sample(world.nodes, len(world.nodes)),
        running=rng.sample(world.running, len(world.running)),
    )
    assert shuffled.decide() == decision
    assert world.decide() == decision


@QUICK
@given(fleets(), st.integers(1, 30), st.sampled_from(["any", "cuda", "cpu"]))
def test_a_total_goes_on_the_fewest_nodes(
    fleet: tuple[list[NodeView], list[RunningJob]], total: int, accelerator: str
) -> None:
    nodes, _ = fleet
    job = JobRequest("j", "alpha", 1, None, None, total, accelerator=accelerator)
    decision = schedule([job], nodes, [], {}, {}, NOW)
    room = sorted((n.free for n in nodes if matches(job, n)), reverse=True)
    fewest = next((i for i in range(1, len(room) + 1) if sum(room[:i]) >= total), None)
    if fewest is None:
        assert decision.placements == []
    else:
        assert len(decision.placements[0].allocations) == fewest


@QUICK
@given(worlds(located=True), st.randoms(use_true_random=False))
def test_invariants_and_order_independence_hold_on_racks_and_zones(
    world: World, rng: random.Random
) -> None:
    decision = world.decide()
    check(world, decision)
    shuffled = replace(world, nodes=rng.sample(world.nodes, len(world.nodes)))
    assert shuffled.decide() == decision


@QUICK
@given(fleets(located=True), requests(max_jobs=1))
def test_a_job_on_several_nodes_stays_in_one_rack_or_zone_when_one_can_hold_it(
    fleet: tuple[list[NodeView], list[RunningJob]], jobs: list[JobRequest]
) -> None:
    """From first principles: a job that one node cannot hold, and that all of some rack's
    free slots (else some zone's) can, is placed within one rack (else one zone)."""
    nodes, _ = fleet
    decision = schedule(jobs, nodes, [], {}, {}, NOW)
    if not decision.placements:
        return
    job, placement = jobs[0], decision.placements[0]
    free = {node.id: node.free for node in nodes}
    by_id = {node.id: node for node in nodes}
    if job.total_procs is None and (job.nodes or 1) == 1:
        return  # one node: placed as without topology
    if job.total_procs is not None and any(fits(job, free, [n]) for n in nodes):
        return  # a total that one node can hold, likewise
    for label in ("rack", "zone"):
        domains = {node.labels[label] for node in nodes if label in node.labels}
        holding = [
            name
            for name in sorted(domains)
            if fits(job, free, [n for n in nodes if n.labels.get(label) == name])
        ]
        if holding:
            names = {by_id[node_id].labels.get(label) for node_id, _ in placement.allocations}
            assert len(names) == 1, f"not within one {label}"
            assert names.pop() in holding
            assert placement.topology is not None
            assert placement.topology.startswith(f"in {label} ")
            return


@QUICK
@given(worlds(quotas=False))
def test_without_preemption_or_estimates_nothing_is_held(world: World) -> None:
    """Nothing to wait for (no preemption, no end estimates, nothing exiting): no slot is
    held back, and the pass is plain greedy placement with backfill."""
    world = replace(
        world,
        allow_preemption=False,
        running=[replace(job, estimated_end=None, preempting=False) for job in world.running],
    )
    decision = world.decide()
    check(world, decision)
    assert decision.reserved == {}
    assert decision.preemptions == []


@QUICK
@given(st.randoms(use_true_random=False))
def test_preemption_makes_room_from_strictly_lower_priority_only(rng: random.Random) -> None:
    """A full fleet running every priority, a queue of every priority. Besides `check`
    (victims strictly lower, each once, enough), the first job in order preempts whenever
    the slots of all strictly lower-priority running jobs would make it fit."""
    nodes = [
        NodeView(f"n{i}", "cuda", "NVIDIA A100", 40_960, {}, slots=4, free=0) for i in range(6)
    ]
    running = [
        RunningJob(f"r{i}", "alpha", rng.randrange(3), {f"n{i}": 4}, None, rng.uniform(0, 99))
        for i in range(6)
    ]
    jobs = [
        JobRequest(f"j{i}", "beta", rng.randrange(3), None, None, rng.randint(1, 10))
        for i in range(8)
    ]
    world = World(jobs, nodes, running, {}, {})
    decision = world.decide()
    check(world, decision)
    first = min(jobs, key=lambda job: (-job.priority, job.id))
    room = Counter[str]()
    for victim in running:
        if victim.priority < first.priority:
            room.update(victim.allocations)
    if fits(first, room, nodes):
        assert first.id in {p.for_job_id for p in decision.preemptions}


def test_fair_share_converges_to_the_weights() -> None:
    """Two projects with weights 1 and 3 and endless backlogs share a 32-slot fleet for 400
    one-second passes; jobs ask for 1-4 slots and run 2-6 passes; usage is cumulative (a
    window longer than the run).

    Tolerance, argued rather than proven: each slot that frees goes to the project that is
    behind in usage/weight, so the weighted gap |usage_a / 1 - usage_b / 3| can only grow by
    work placed but not yet counted, at most the whole fleet for one job duration:
    32 x 6 = 192 slot-seconds (measured over seeds 0-7: at most 68). Against about
    32 x 400 / 4 = 3,200 for project a at the end, a gap of 192 moves usage_b / usage_a by at
    most 3 x 192 / 3,200 = 0.18, so 3 +- 0.18 is the bound; the gap staying bounded while
    usage grows is what convergence means here.
    """
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(4)]
    policies = {"a": ProjectPolicy(weight=1.0), "b": ProjectPolicy(weight=3.0)}
    usage = {"a": 0.0, "b": 0.0}
    running: dict[str, tuple[RunningJob, int]] = {}
    queued: list[JobRequest] = []
    serial, widest_gap = 0, 0.0
    for tick in range(400):
        for job_id in [j for j, (_, end) in running.items() if end <= tick]:
            del running[job_id]
        for project in ("a", "b"):
            while sum(job.project == project for job in queued) < 20:
                serial += 1
                queued.append(
                    JobRequest(f"{serial:06d}", project, 1, None, None, rng.randint(1, 4))
                )
        active = [run for run, _ in running.values()]
        used = Counter[str]()
        for run in active:
            used.update(run.allocations)
        view = [NodeView(n, "cpu", None, None, {}, slots=8, free=8 - used[n]) for n in nodes]
        decision = schedule(queued, view, active, usage, policies, float(tick))
        by_id = {job.id: job for job in queued}
        for placement in decision.placements:
            job = by_id[placement.job_id]
            end = tick + rng.randint(2, 6)
            running[job.id] = (
                RunningJob(job.id, job.project, 1, dict(placement.allocations), end, tick),
                end,
            )
        queued = [job for job in queued if job.id not in running]
        for run, _ in running.values():
            usage[run.project] += sum(run.allocations.values())
        widest_gap = max(widest_gap, abs(usage["a"] - usage["b"] / 3))
    assert widest_gap <= 32 * 6
    assert 3 - 0.18 <= usage["b"] / usage["a"] <= 3 + 0.18
    assert sum(usage.values()) >= 0.95 * 32 * 400, "the fleet stays busy while sharing"
