"""Placement: queued jobs and the fleet's free slots in; what to start, preempt and say out.

A pure function of its arguments (no database, clock or I/O), so the scheduler loop, the API's
"why is my job pending" answer, tests and benchmarks all see the same decisions. Nodes and job
requests are core's (`ampfleet.core.fleet`), so admission and placement agree on what matches.
The rules, and why each one is there:

* Queue order is priority, then weighted fair share, then FIFO. Usage comes from the caller (a
  sliding window of GPU-seconds). Within a pass, every placed job charges its project
  `slots * PLACED_CHARGE_S` on top, so projects that start a pass level take turns instead of
  one of them taking the whole pass on a tie; across passes the measured usage takes over.
* Gangs are all or nothing: a distributed job with some ranks started holds GPUs idle at its
  rendezvous. Best fit for fixed shapes and the fewest nodes for totals keep whole nodes free
  for the large gangs that need them, and fewer nodes means less AllReduce over the network.
* A job on more than one node goes within one rack when one can hold it, else within one
  zone, else across (`topology.py`, labels `TOPOLOGY_LABELS`): its AllReduce then crosses the
  fewest, fastest links. A preference among the plans that fit now, never a reason to wait;
  the placement says where the job landed (`Placement.topology`).
* Quotas cap what a project holds at once; a capped job never blocks other projects.
* A restart whose shape is not free runs on the ranks that are, down to its `procs_min` (it
  resumes from its checkpoint resharded onto them), before any preemption or reservation:
  the job said it would rather train on fewer ranks now than evict others or wait.
* One EASY reservation per pass, for the first job that cannot start (leaving out jobs capped
  by their quota, jobs too large for the fleet and jobs waiting on a preemption): the earliest
  time that running jobs' estimated ends make room, and the free slots it will need then are
  held back. Later jobs use everything else (backfill). Without a reservation a stream of
  small jobs starves every large one; one per pass bounds the slots it leaves idle. With no
  estimate (no running job reports an end that helps) nothing is held: idling slots for an
  unknown time costs certain work for an uncertain gain, and the job keeps its place in order.
* Preemption takes only strictly lower priority, and the job it is for is not placed in the
  same pass: victims must checkpoint and exit first. The free slots the job will need are held
  meanwhile, so backfill cannot undo the preemption. A victim keeps its real priority until it
  is gone, so the next pass picks the same victims again; the caller treats a repeat as a no-op.

The pass's state (free slots, holds, charges, what it has claimed) lives in `_Pass`; the
search for victims is `preemption.py`'s, the choice of rack or zone `topology.py`'s, and the
words of every reason are `reasons.py`'s.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ampfleet.core.fairshare import ProjectPolicy, queue_key, weight
from ampfleet.core.fleet import JobRequest, NodeView, fits_fleet, matches
from ampfleet.scheduler import reasons
from ampfleet.scheduler.capacity_index import CapacityIndex, Overlay
from ampfleet.scheduler.preemption import Preemptible, RunningJob
from ampfleet.scheduler.topology import Topology, labels_in_use

__all__ = [
    "Decision",
    "JobRequest",
    "NodeView",
    "Pending",
    "Placement",
    "Preemption",
    "ProjectPolicy",
    "RunningJob",
    "fits_fleet",
    "queue_key",
    "queue_order",
    "schedule",
]

PLACED_CHARGE_S = 1.0
"""Usage (seconds per slot) charged to a project for each job it is given within one pass."""


@dataclass(frozen=True)
class Placement:
    job_id: str
    allocations: tuple[tuple[str, int], ...]
    """(node id, slots) in node-rank order: rank 0 first."""
    shape: int | None = None
    """The ranks the job asked for, when this restart runs on fewer (its procs_min)."""
    topology: str | None = None
    """Where a job on more than one node sits on the network, in words (`reasons.spread`);
    None when it is on one node or its nodes carry no topology label (`topology.py`)."""


@dataclass(frozen=True)
class Preemption:
    victim_id: str
    for_job_id: str


@dataclass(frozen=True)
class Pending:
    position: int
    """1-based, in the order the pass considered jobs, over the jobs it did not place."""
    reason: str
    estimated_start: float | None


@dataclass
class Decision:
    placements: list[Placement]
    preemptions: list[Preemption]
    pending: dict[str, Pending]
    reserved: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    """Free slots held back this pass, per job: its reservation, or what it will need once its
    preemption victims are gone. Nothing else was placed on them."""


_Constraints = tuple[str, str | None, int | None, tuple[tuple[str, str], ...]]
_Rank = tuple[float, str, str]
_Plan = list[tuple[int, int]]


def queue_order(
    jobs: Iterable[JobRequest], usage: Mapping[str, float], policies: Mapping[str, ProjectPolicy]
) -> list[JobRequest]:
    """The order a pass starts from; `schedule` then charges projects for what it places."""
    return sorted(jobs, key=lambda job: queue_key(job, usage, policies))


def schedule(
    jobs: Sequence[JobRequest],
    nodes: Sequence[NodeView],
    running: Sequence[RunningJob],
    usage: Mapping[str, float],
    policies: Mapping[str, ProjectPolicy],
    now: float,
    allow_preemption: bool = True,
) -> Decision:
    """One pass: every job is placed, or pending with a reason and its position."""
    if len({job.id for job in jobs}) != len(jobs):
        raise ValueError("job ids must be unique")
    scheduling = _Pass(
        nodes, running, policies, now=now, allow_preemption=allow_preemption, jobs=jobs
    )
    for job in _considered(jobs, usage, policies, scheduling.charged):
        scheduling.consider(job)
    return scheduling.decision()


def _considered(
    jobs: Sequence[JobRequest],
    usage: Mapping[str, float],
    policies: Mapping[str, ProjectPolicy],
    charged: Mapping[str, float],
) -> Iterator[JobRequest]:
    """Jobs in queue order, re-ranking a project by what `charged` holds after each of its jobs.

    Each priority level is a heap of every project's next job, so a charge made while a job was
    out is seen before that project's next job is ranked. With no charges this is `queue_order`.
    """
    levels: dict[int, dict[str, list[JobRequest]]] = {}
    for job in sorted(jobs, key=lambda j: j.id, reverse=True):
        levels.setdefault(job.priority, {}).setdefault(job.project, []).append(job)
    for priority in sorted(levels, reverse=True):
        queues = levels[priority]  # each one reversed: its next job is last

        def rank(project: str, queues: dict[str, list[JobRequest]] = queues) -> _Rank:
            share = (usage.get(project, 0.0) + charged.get(project, 0.0)) / weight(
                project, policies
            )
            return share, queues[project][-1].id, project

        heap = [rank(project) for project in queues]
        heapq.heapify(heap)
        while heap:
            project = heapq.heappop(heap)[2]
            yield queues[project].pop()
            if queues[project]:
                heapq.heappush(heap, rank(project))


def _constraints(job: JobRequest) -> _Constraints:
    return (
        job.accelerator,
        job.gpu_type.lower() if job.gpu_type else None,
        job.min_gpu_memory_mb,
        tuple(sorted(job.selector.items())),
    )


def _plan(index: CapacityIndex, groups: Sequence[int], job: JobRequest) -> _Plan | None:
    if job.total_procs is not None:
        return index.pack(groups, job.total_procs)
    per_node = job.procs_per_node or 1
    chosen = index.best_fit(groups, job.nodes or 1, per_node)
    return None if chosen is None else [(node, per_node) for node in chosen]


def _fewer_ranks(index: CapacityIndex, groups: Sequence[int], job: JobRequest) -> _Plan | None:
    """A restart whose shape is not free, on as many ranks as are (at least its
    `min_procs`), packed onto the fewest nodes; None when it may not or cannot."""
    if job.min_procs is None:
        return None
    ranks = min(job.slots - 1, index.total_free(groups))
    return index.pack(groups, ranks) if ranks >= job.min_procs else None


class _Pass:
    """What one pass has left to give: free slots, holds, project charges, and its answers.

    Nodes are numbered in id order; unschedulable ones never enter the capacity index. Nodes
    are grouped by what jobs can select on: labels no job in the pass selects on are left out
    of the grouping, so per-host labels do not split the fleet into groups of one.
    """

    def __init__(
        self,
        nodes: Sequence[NodeView],
        running: Sequence[RunningJob],
        policies: Mapping[str, ProjectPolicy],
        *,
        now: float,
        allow_preemption: bool,
        jobs: Sequence[JobRequest],
    ) -> None:
        self.policies = policies
        self.now = now
        self.nodes = sorted(nodes, key=lambda node: node.id)
        number = {node.id: i for i, node in enumerate(self.nodes)}
        if len(number) != len(self.nodes):
            raise ValueError("node ids must be unique")
        self.node_slots = [node.slots for node in self.nodes]
        self._group_nodes(sorted({key for job in jobs for key in job.selector}))

        self.charged: dict[str, float] = {}
        self.holding: dict[str, int] = {}
        self.jobs_placed: dict[str, int] = {}
        self.allocations: dict[str, list[tuple[int, int]]] = {}
        for job in running:
            self.holding[job.project] = self.holding.get(job.project, 0) + sum(
                job.allocations.values()
            )
            self.jobs_placed[job.project] = self.jobs_placed.get(job.project, 0) + 1
            self.allocations[job.id] = [
                (number[node_id], slots)
                for node_id, slots in job.allocations.items()
                if node_id in number
            ]
        self.preemptible = Preemptible(
            running, self.allocations, group_of=self.index.group, allow_preemption=allow_preemption
        )
        self.ending = sorted(
            (job.estimated_end, job.id, job) for job in running if job.estimated_end is not None
        )
        self.victims: set[str] = set()
        self.head_seen = False
        self.near_reservation: set[str] = set()  # running on the reservation's nodes
        # (job, its project, free slots held for it), in order
        self.holds: list[tuple[str, str, _Plan]] = []
        # Bumped by `_place` and `_hold`, the two changes of free slots, holds and victims:
        # the two caches below hold only while it stays the same.
        self.changes = 0
        self.no_victims: set[tuple[object, ...]] = set()
        self.capacity_reasons: dict[tuple[object, ...], tuple[int, str]] = {}
        self.groups_for: dict[_Constraints, tuple[int, ...]] = {}
        self.hopeless: dict[tuple[object, ...], str | None] = {}
        self.placements: list[Placement] = []
        self.preemptions: list[Preemption] = []
        self.reserved: dict[str, tuple[tuple[str, int], ...]] = {}
        self.pending: list[tuple[str, str, float | None]] = []

    def _group_nodes(self, selector_keys: list[str]) -> None:
        signatures: dict[tuple[object, ...], int] = {}
        self.examples: list[NodeView] = []
        self.usable: list[list[NodeView]] = []
        self.sizes: list[dict[int, int]] = []  # per group: node slots -> schedulable nodes
        self.down: list[int] = []
        group_of = []
        for node in self.nodes:
            labels = tuple(node.labels.get(key) for key in selector_keys)
            signature = (node.accelerator, node.gpu_model, node.gpu_memory_mb, labels)
            group = signatures.setdefault(signature, len(signatures))
            if group == len(self.examples):
                self.examples.append(node)
                self.usable.append([])
                self.sizes.append({})
                self.down.append(0)
            group_of.append(group)
            if node.schedulable:
                self.usable[group].append(node)
                self.sizes[group][node.slots] = self.sizes[group].get(node.slots, 0) + 1
            else:
                self.down[group] += 1
        usable = (node.slots for node in self.nodes if node.schedulable)
        self.index = CapacityIndex(len(self.examples), max(usable, default=0))
        free = [min(max(node.free, 0), node.slots) for node in self.nodes]
        for number, node in enumerate(self.nodes):
            if node.schedulable:
                self.index.add(number, group_of[number], free[number])
        levels = labels_in_use(node.labels for node in self.nodes)
        located = [
            (number, group_of[number], node.labels, free[number])
            for number, node in enumerate(self.nodes)
            if node.schedulable and levels
        ]
        self.topology = Topology(levels, self.index.max_free, located)

    # -- one job ----------------------------------------------------------------------------

    def consider(self, job: JobRequest) -> None:
        """Place `job` now, or record why not (and when it may start)."""
        policy = self.policies.get(job.project)
        limit = policy.max_slots if policy is not None else None
        holds = self.holding.get(job.project, 0)
        if limit is not None and holds + job.slots > limit:
            self.pending.append((job.id, reasons.slots_quota(job.project, limit, holds), None))
            return
        job_limit = policy.max_jobs if policy is not None else None
        placed = self.jobs_placed.get(job.project, 0)
        if job_limit is not None and placed >= job_limit:
            self.pending.append((job.id, reasons.jobs_quota(job.project, job_limit), None))
            return
        constraints = _constraints(job)
        groups = self._groups(job, constraints)
        hopeless = self._hopeless(job, constraints, groups)
        plan = _plan(self.index, groups, job) if hopeless is None else None
        spread = None
        if plan is not None and len(plan) > 1:
            per_node = None if job.total_procs is not None else job.procs_per_node or 1
            plan, spread = self.topology.prefer(
                groups, plan, lambda index, within: _plan(index, within, job), per_node
            )
        if plan is None:
            plan = _fewer_ranks(self.index, groups, job)
            if plan is not None and len(plan) > 1:
                spread = self.topology.describe(groups, plan)
        if plan is not None:
            topology = None if spread is None else reasons.spread(spread, job)
            self._place(job, plan, topology)
            return
        if hopeless is not None:
            self.pending.append((job.id, reasons.no_node_matches(hopeless), None))
            return
        self.pending.append((job.id, *self._preempt_or_reserve(job, constraints, groups)))

    def _preempt_or_reserve(
        self, job: JobRequest, constraints: _Constraints, groups: tuple[int, ...]
    ) -> tuple[str, float | None]:
        """Preempt for `job`, or reserve for it when it is the first to wait; the reason it
        is pending and when it is estimated to start."""
        victims = self._preempt_for(job, constraints, groups)
        if victims:
            new = [(victim.id, victim.project) for victim in victims if not victim.preempting]
            exiting = [(victim.id, victim.project) for victim in victims if victim.preempting]
            return reasons.preemption_wait(new, exiting, job.project), None
        if not self.head_seen:
            self.head_seen = True
            waiting = self._capacity_reason(job, groups)
            start = self._reserve(job, groups)
            if start is None:
                return reasons.no_reservation(waiting), None
            return reasons.reserved(waiting, start - self.now), start
        return self._capacity_reason(job, groups), None

    def _groups(self, job: JobRequest, constraints: _Constraints) -> tuple[int, ...]:
        groups = self.groups_for.get(constraints)
        if groups is None:
            groups = tuple(i for i, example in enumerate(self.examples) if matches(job, example))
            self.groups_for[constraints] = groups
        return groups

    def _hopeless(
        self, job: JobRequest, constraints: _Constraints, groups: tuple[int, ...]
    ) -> str | None:
        """Why the job cannot fit even when every schedulable matching node is free."""
        key = (constraints, job.nodes, job.procs_per_node, job.total_procs)
        if key not in self.hopeless:
            if self._could_fit(job, groups):
                self.hopeless[key] = None
                return None
            usable = [node for group in groups for node in self.usable[group]]
            down = sum(self.down[group] for group in groups)
            message = fits_fleet(job, usable) if usable else reasons.no_schedulable_node(job)
            if message is not None and down:
                message = reasons.with_nodes_down(message, down)
            self.hopeless[key] = message
        return self.hopeless[key]

    def _could_fit(self, job: JobRequest, groups: tuple[int, ...]) -> bool:
        sizes = [(size, count) for group in groups for size, count in self.sizes[group].items()]
        if job.total_procs is not None:
            return sum(size * count for size, count in sizes) >= job.total_procs
        per_node = job.procs_per_node or 1
        return sum(count for size, count in sizes if size >= per_node) >= (job.nodes or 1)

    def _capacity_reason(self, job: JobRequest, groups: tuple[int, ...]) -> str:
        """What a job that waits for free slots is told; kept while no slot changes hands."""
        key = (groups, job.nodes, job.procs_per_node, job.total_procs, job.project)
        cached = self.capacity_reasons.get(key)
        if cached is not None and cached[0] == self.changes:
            return cached[1]
        blocking = self._holders_in_the_way(job, groups)
        if blocking:
            text = reasons.behind_holders(blocking, job.project)
        else:
            text = reasons.capacity_wait(job, self.index, groups)
        self.capacity_reasons[key] = (self.changes, text)
        return text

    def _holders_in_the_way(
        self, job: JobRequest, groups: tuple[int, ...]
    ) -> list[tuple[str, str]]:
        """Jobs ordered earlier whose held slots on matching nodes would let `job` fit now."""
        if not self.holds:
            return []
        overlay = self._overlay(job, groups)
        in_the_way = [
            (holder, project) for holder, project, held in self.holds if overlay.return_slots(held)
        ]
        return in_the_way if overlay.fits() else []

    def _place(self, job: JobRequest, plan: _Plan, topology: str | None = None) -> None:
        slots = sum(share for _, share in plan)
        for node, share in plan:
            self._take(node, share)
        self.changes += 1
        self.holding[job.project] = self.holding.get(job.project, 0) + slots
        self.jobs_placed[job.project] = self.jobs_placed.get(job.project, 0) + 1
        self.charged[job.project] = self.charged.get(job.project, 0.0) + slots * PLACED_CHARGE_S
        allocations = tuple((self.nodes[node].id, share) for node, share in plan)
        shrunk = job.slots if slots < job.slots else None
        self.placements.append(Placement(job.id, allocations, shrunk, topology))

    def _take(self, node: int, slots: int) -> None:
        self.index.take(node, slots)
        self.topology.take(node, slots)

    # -- holding slots for later ------------------------------------------------------------

    def _overlay(self, job: JobRequest, groups: tuple[int, ...]) -> Overlay:
        return Overlay(
            self.index,
            self.node_slots,
            groups,
            nodes=job.nodes or 1,
            per_node=job.procs_per_node or 1,
            total=job.total_procs,
        )

    def _hold(self, job: JobRequest, overlay: Overlay) -> _Plan:
        """Plan `job` on what the overlay returns; take the free slots that plan needs now."""
        plan = _plan(overlay.scratch(), (0,), job)
        if plan is None:
            raise RuntimeError("the overlay said the job fits")
        held = []
        for node, share in plan:
            needed_now = min(self.index.free(node), share - overlay.returned.get(node, 0))
            if needed_now > 0:
                self._take(node, needed_now)
                held.append((node, needed_now))
        self.changes += 1
        self.holds.append((job.id, job.project, held))
        self.reserved[job.id] = tuple((self.nodes[node].id, slots) for node, slots in held)
        return plan

    def _reserve(self, job: JobRequest, groups: tuple[int, ...]) -> float | None:
        """EASY: the earliest estimated end after which `job` fits, and hold what it needs."""
        overlay = self._overlay(job, groups)
        for end, victim_id, _ in self.ending:
            if victim_id in self.victims:
                continue  # its slots are promised to the job that preempts it
            if overlay.return_slots(self.allocations[victim_id]) and overlay.fits():
                plan = self._hold(job, overlay)
                spoken_for = {node for node, _ in plan}
                self.near_reservation = {
                    victim_id
                    for victim_id, allocations in self.allocations.items()
                    if any(node in spoken_for for node, _ in allocations)
                }
                return max(end, self.now)
        return None

    def _preempt_for(
        self, job: JobRequest, constraints: _Constraints, groups: tuple[int, ...]
    ) -> list[RunningJob]:
        """The victims whose slots make `job` fit (`preemption.Preemptible`), told to exit;
        their slots and the free slots it needs are then spoken for. None fit: []."""
        if not self.preemptible.worth_searching(job.priority):
            return []
        key = (constraints, job.nodes, job.procs_per_node, job.total_procs, job.priority)
        if (*key, self.changes) in self.no_victims:
            return []
        victims = self.preemptible.fewest_victims(
            job.priority, groups, lambda: self._overlay(job, groups), self._claimed
        )
        if victims is None:
            self.no_victims.add((*key, self.changes))
            return []
        overlay = self._overlay(job, groups)
        for victim in victims:
            overlay.return_slots(self.allocations[victim.id])
            self.victims.add(victim.id)
            if not victim.preempting:
                self.preemptions.append(Preemption(victim.id, job.id))
        self._hold(job, overlay)
        return victims

    def _claimed(self, job_id: str) -> bool:
        """A running job this pass counts on: another job's victim, or under the reservation."""
        return job_id in self.victims or job_id in self.near_reservation

    def decision(self) -> Decision:
        pending = {
            job_id: Pending(position, reason, start)
            for position, (job_id, reason, start) in enumerate(self.pending, start=1)
        }
        return Decision(self.placements, self.preemptions, pending, self.reserved)
