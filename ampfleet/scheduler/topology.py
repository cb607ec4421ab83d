"""Where nodes sit on the network, and a job that spans nodes kept within one rack or zone.

A gang's collectives cross the links between its nodes at every step: within a rack they
cross one switch, within a zone one site, across zones the slowest links the fleet has. So a
job placed on more than one node goes within one rack when some rack can hold it, else within
one zone, and across only when no single one can. Operators say where a node is with node
labels (`AMPFLEET_NODE_LABELS`) named in `TOPOLOGY_LABELS`; a label's value names one domain
across the fleet, so rack names are meant to be unique, not unique per zone.

The rules, and why:

* A preference, never a constraint: a job that no single domain can hold runs across domains
  now rather than waiting for one to empty. A job that must stay in one says so with its
  selector (`resources.selector: {"rack": "r1"}`), which constrains as before.
* A job that fits one node is placed as without topology (best fit over every matching node):
  one node is already the best a network can do.
* Among the domains that can hold a job, the best fit wins: fewest nodes, then fewest slots
  left over on them, then the domain with the lowest node id. Filling the tightest domain
  keeps the roomy ones for the larger gangs that need them, and the same input always gives
  the same answer.
* Planning within a domain is the capacity index's own best fit or pack, on an index per
  label whose groups are the pass's groups split by the label's value (see `Topology`); a
  fleet without these labels builds none and places exactly as before.

Not covered: slots held for a reservation or a preemption are planned on every matching node
(a hold is recomputed each pass, and the job gets the preference when it is placed); a restart
on fewer ranks (`procs_min`) takes the ranks that are free wherever they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ampfleet.scheduler.capacity_index import CapacityIndex

TOPOLOGY_LABELS = ("rack", "zone")
"""Node labels that say where a node is on the network, narrowest first."""

Plan = list[tuple[int, int]]
"""(node number, slots), in node-rank order."""


@dataclass(frozen=True)
class Spread:
    """Where a plan on more than one node sits, at one topology label."""

    label: str
    names: tuple[str, ...]
    """The label's values on the plan's nodes, sorted."""
    unlabelled: int
    """The plan's nodes without the label."""
    missed: tuple[str, ...]
    """Narrower (or, across, all) labels at which no single domain could hold the job."""

    @property
    def within(self) -> bool:
        return len(self.names) == 1 and not self.unlabelled


@dataclass(frozen=True)
class _Domain:
    name: str
    groups: tuple[int, ...]
    """Its groups in its level's index."""
    whole: bool
    """It holds every node the job matches (a selector chose it, or the fleet has one)."""
    first: int
    """Its lowest node number (node id order)."""


def labels_in_use(labels: Iterable[Mapping[str, str]]) -> tuple[str, ...]:
    """The topology labels that some node carries, narrowest first."""
    carried = {label for each in labels for label in TOPOLOGY_LABELS if label in each}
    return tuple(label for label in TOPOLOGY_LABELS if label in carried)


class Topology:
    """Per topology label the fleet uses, the pass's free slots once more, in a capacity
    index of its own whose groups are (the pass's group, the label's value).

    Indexes of their own rather than topology in the pass's group key: every other question
    a pass asks (does it fit, best fit over all matching nodes, what is free) walks a job's
    groups, and a fleet of many racks would multiply them. `take` keeps them in step.
    """

    def __init__(
        self,
        levels: Sequence[str],
        max_free: int,
        nodes: Sequence[tuple[int, int, Mapping[str, str], int]],
    ) -> None:
        """`nodes`: (number, the pass's group, labels, free slots) of each schedulable node,
        in number order; `levels`: the topology labels to index, narrowest first."""
        self._levels = [_Level(label, max_free, nodes) for label in levels]
        self._domains: dict[tuple[int, ...], list[list[_Domain]]] = {}

    def take(self, node: int, slots: int) -> None:
        for level in self._levels:
            if level.index.group(node) is not None:
                level.index.take(node, slots)

    def prefer(
        self,
        groups: tuple[int, ...],
        plan: Plan,
        plan_on: Callable[[CapacityIndex, tuple[int, ...]], Plan | None],
        per_node: int | None,
    ) -> tuple[Plan, Spread | None]:
        """The plan within the best-fitting domain at the narrowest label that has one, else
        `plan` (made on all of the job's `groups`); and where the chosen plan sits.
        `per_node`: the slots on each node of a fixed shape, None for a total."""
        missed: list[str] = []
        for level, domains in zip(self._levels, self._domains_of(groups), strict=True):
            if domains:
                best = level.best(domains, plan, plan_on, per_node)
                if best is not None:
                    name, chosen = best
                    return chosen, Spread(level.label, (name,), 0, tuple(missed))
                missed.append(level.label)
        if not missed:
            return plan, None  # no node the job matches carries a topology label
        return plan, self.describe(groups, plan, missed=tuple(missed))

    def describe(
        self, groups: tuple[int, ...], plan: Plan, *, missed: tuple[str, ...] = ()
    ) -> Spread | None:
        """Where `plan` sits at the narrowest label the job's nodes carry; None if none."""
        domains = self._domains_of(groups)
        level = next(
            (lv for lv, reached in zip(self._levels, domains, strict=True) if reached), None
        )
        if level is None:
            return None
        names = [level.name_of(node) for node, _ in plan]
        known = tuple(sorted({name for name in names if name is not None}))
        return Spread(level.label, known, names.count(None), missed)

    def _domains_of(self, groups: tuple[int, ...]) -> list[list[_Domain]]:
        cached = self._domains.get(groups)
        if cached is None:
            cached = self._domains[groups] = [level.domains(groups) for level in self._levels]
        return cached


class _Level:
    """One topology label's index, and the domains a job's groups reach in it."""

    def __init__(
        self, label: str, max_free: int, nodes: Sequence[tuple[int, int, Mapping[str, str], int]]
    ) -> None:
        self.label = label
        self._names: list[str] = []  # per group here: the label's value
        self._first: list[int] = []  # per group here: its lowest node number
        self._split: dict[int, list[int]] = {}  # the pass's group -> its groups here
        self._unlabelled: set[int] = set()  # the pass's groups with a node without the label
        keys: dict[tuple[int, str], int] = {}
        members = []
        for number, group, labels, free in nodes:
            name = labels.get(label)
            if name is None:
                self._unlabelled.add(group)
                continue
            here = keys.get((group, name))
            if here is None:
                here = keys[(group, name)] = len(self._names)
                self._names.append(name)
                self._first.append(number)
                self._split.setdefault(group, []).append(here)
            members.append((number, here, free))
        self.index = CapacityIndex(len(self._names), max_free)
        for number, here, free in members:
            self.index.add(number, here, free)

    def name_of(self, node: int) -> str | None:
        here = self.index.group(node)
        return None if here is None else self._names[here]

    def domains(self, groups: tuple[int, ...]) -> list[_Domain]:
        """The domains that the pass's `groups` reach, by lowest node id."""
        by_name: dict[str, list[int]] = {}
        for group in groups:
            for here in self._split.get(group, ()):
                by_name.setdefault(self._names[here], []).append(here)
        whole = len(by_name) == 1 and not self._unlabelled.intersection(groups)
        found = [
            _Domain(name, tuple(members), whole, min(self._first[m] for m in members))
            for name, members in by_name.items()
        ]
        return sorted(found, key=lambda domain: domain.first)

    def best(
        self,
        domains: Sequence[_Domain],
        plan: Plan,
        plan_on: Callable[[CapacityIndex, tuple[int, ...]], Plan | None],
        per_node: int | None,
    ) -> tuple[str, Plan] | None:
        """The best-fitting domain's name and plan: fewest nodes, then fewest slots left
        over on them, then the lowest node id (domains come in that order and a tie keeps
        the earlier). None when no single domain can hold the job."""
        index, slots = self.index, sum(share for _, share in plan)
        best: tuple[tuple[int, int], str, Plan] | None = None
        for domain in domains:
            if domain.whole:
                candidate: Plan | None = plan  # every node the job matches is in this one
            elif index.total_free(domain.groups) < slots or (
                best is not None
                and per_node is not None
                and not _may_fit_better(index, domain, per_node, len(plan), best[0][1])
            ):
                continue
            else:
                candidate = plan_on(index, domain.groups)
            if candidate is not None:
                left_over = sum(index.free(node) - share for node, share in candidate)
                score = (len(candidate), left_over)
                if best is None or score < best[0]:
                    best = (score, domain.name, candidate)
        return None if best is None else (best[1], best[2])


def _may_fit_better(
    index: CapacityIndex, domain: _Domain, per_node: int, nodes: int, left_over: int
) -> bool:
    """Whether a fixed shape could leave fewer than `left_over` slots in `domain`: each of
    its nodes leaves at least what the domain's fullest-fitting node would. A cheap bound, so
    that a fleet of many racks plans in few of them."""
    least = index.least_free_at_least(domain.groups, per_node)
    return least is not None and nodes * (least - per_node) < left_over
