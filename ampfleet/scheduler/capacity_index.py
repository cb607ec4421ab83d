"""Free slots of schedulable nodes, indexed so that a pass never scans the fleet per job.

A pass weighs thousands of queued jobs against a thousand nodes; a scan of every node for every
job is what made passes slow. Two facts make a small index enough:

* Jobs cannot tell apart nodes that share accelerator, GPU model, GPU memory and the labels jobs
  select on. The engine groups such nodes and resolves a job's constraints to whole groups, once
  per distinct set of constraints.
* A node's free slot count is a small integer (a node has a handful of GPUs). Inside a group,
  nodes sit in one bucket per free count, so "best fit" is the first non-empty bucket at or
  above the request and "does it fit at all" is a sum over a few bucket lengths.

Nodes are numbered in node id order and every bucket is kept sorted, so ties break by node id
without a sort in the hot path and the same input always gives the same answer.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence


class CapacityIndex:
    """Free slots per node (numbered by id order), bucketed by group and free count."""

    def __init__(self, groups: int, max_free: int) -> None:
        self.max_free = max_free
        # _buckets[group][free]: node numbers with exactly `free` free slots, sorted; free >= 1.
        self._buckets: list[list[list[int]]] = [
            [[] for _ in range(max_free + 1)] for _ in range(groups)
        ]
        self._group_free = [0] * groups
        self._free: dict[int, int] = {}
        self._group_of: dict[int, int] = {}

    def add(self, node: int, group: int, free: int) -> None:
        if not 0 <= free <= self.max_free:
            raise ValueError(f"node {node}: free {free} outside 0..{self.max_free}")
        self._free[node] = free
        self._group_of[node] = group
        if free:
            insort(self._buckets[group][free], node)
            self._group_free[group] += free

    def free(self, node: int) -> int:
        return self._free.get(node, 0)

    def group(self, node: int) -> int | None:
        """The node's group, or None when the node is not in the index (not schedulable)."""
        return self._group_of.get(node)

    def nodes_with_free(self, groups: Iterable[int]) -> Iterator[int]:
        for group in groups:
            for bucket in self._buckets[group]:
                yield from bucket

    def take(self, node: int, slots: int) -> None:
        before = self._free[node]
        after = before - slots
        if slots < 1 or after < 0:
            raise ValueError(f"node {node}: cannot take {slots} of {before} free slots")
        group = self._group_of[node]
        bucket = self._buckets[group][before]
        del bucket[bisect_left(bucket, node)]
        if after:
            insort(self._buckets[group][after], node)
        self._free[node] = after
        self._group_free[group] -= slots

    def total_free(self, groups: Iterable[int]) -> int:
        group_free = self._group_free
        return sum(group_free[group] for group in groups)

    def nodes_with_at_least(self, groups: Iterable[int], slots: int) -> int:
        low, top = max(slots, 1), self.max_free + 1
        count = 0
        for group in groups:
            for bucket in self._buckets[group][low:top]:
                count += len(bucket)
        return count

    def least_free_at_least(self, groups: Iterable[int], slots: int) -> int | None:
        """The fewest free slots, at least `slots`, that some node of `groups` has."""
        buckets = [self._buckets[group] for group in groups]
        for free in range(max(slots, 1), self.max_free + 1):
            if any(bucket[free] for bucket in buckets):
                return free
        return None

    def best_fit(self, groups: Sequence[int], nodes: int, per_node: int) -> list[int] | None:
        """`nodes` distinct nodes with at least `per_node` free, the fewest left over first."""
        groups = self._with_free(groups)
        if self.nodes_with_at_least(groups, per_node) < nodes:
            return None  # a count of bucket lengths, instead of walking every bucket
        chosen: list[int] = []
        for free in range(per_node, self.max_free + 1):
            for node in self._by_id(groups, free):
                chosen.append(node)
                if len(chosen) == nodes:
                    return chosen
        return None

    def pack(self, groups: Sequence[int], total: int) -> list[tuple[int, int]] | None:
        """`total` slots on the fewest nodes, as (node, slots) with the largest share first.

        One node when one can hold it all (best fit). Otherwise the fullest-free nodes are
        taken first, which gives the fewest nodes; the last, partial share goes to the node
        that it fills best, so packing a remainder does not break open an empty node.
        """
        if self.total_free(groups) < total:
            return None
        groups = self._with_free(groups)
        for free in range(total, self.max_free + 1):
            for node in self._by_id(groups, free):
                return [(node, total)]
        whole: list[tuple[int, int]] = []
        needed = total
        for free in range(self.max_free, 0, -1):
            for node in self._by_id(groups, free):
                if free >= needed:
                    return [*whole, (self._best_for(groups, needed, whole), needed)]
                whole.append((node, free))
                needed -= free
        return None  # unreachable: total_free covered `total`

    def _best_for(self, groups: Sequence[int], slots: int, taken: list[tuple[int, int]]) -> int:
        skip = {node for node, _ in taken}
        for free in range(slots, self.max_free + 1):
            for node in self._by_id(groups, free):
                if node not in skip:
                    return node
        raise AssertionError("a node with enough free slots was seen by the caller")

    def _with_free(self, groups: Sequence[int]) -> list[int]:
        """The groups with a free slot: in a busy fleet most have none, and the bucket
        loops then skip them once instead of once per free count."""
        group_free = self._group_free
        return [group for group in groups if group_free[group]]

    def _by_id(self, groups: Sequence[int], free: int) -> Iterable[int]:
        lists = [bucket for group in groups if (bucket := self._buckets[group][free])]
        if len(lists) == 1:
            return lists[0]
        return heapq.merge(*lists)


class Overlay:
    """Whether one request would fit if some held slots came back: the what-if of preemption
    and reservations, kept incremental so trying victims one by one costs one update each.

    A fixed shape counts nodes with at least `per_node` free; a total counts free slots.
    """

    def __init__(
        self,
        index: CapacityIndex,
        node_slots: Sequence[int],
        groups: Sequence[int],
        *,
        nodes: int,
        per_node: int,
        total: int | None,
    ) -> None:
        self._index = index
        self._node_slots = node_slots
        self._groups = groups
        self._group_set = set(groups)
        self._per_node = per_node
        self._counts_slots = total is not None
        if total is None:
            self._have, self._need = index.nodes_with_at_least(groups, per_node), nodes
        else:
            self._have, self._need = index.total_free(groups), total
        self.returned: dict[int, int] = {}

    def fits(self) -> bool:
        return self._have >= self._need

    def return_slots(self, allocations: Iterable[tuple[int, int]]) -> bool:
        """What if these (node, slots) came back; True if any are on a matching node."""
        return self._shift(allocations, +1)

    def withdraw(self, allocations: Iterable[tuple[int, int]]) -> None:
        """Undo a `return_slots` of these (node, slots)."""
        self._shift(allocations, -1)

    def _shift(self, allocations: Iterable[tuple[int, int]], sign: int) -> bool:
        touched = False
        for node, slots in allocations:
            if self._index.group(node) not in self._group_set:
                continue
            before = self.returned.get(node, 0)
            after = before + sign * slots
            self._have += self._worth(node, after) - self._worth(node, before)
            self.returned[node] = after
            touched = True
        return touched

    def scratch(self) -> CapacityIndex:
        """A one-group index of the matching nodes as they would be, to plan on."""
        scratch = CapacityIndex(1, self._index.max_free)
        nodes = {*self._index.nodes_with_free(self._groups), *self.returned}
        for node in sorted(nodes):
            scratch.add(node, 0, self._free(node, self.returned.get(node, 0)))
        return scratch

    def _free(self, node: int, returned: int) -> int:
        return min(self._index.free(node) + returned, self._node_slots[node])

    def _worth(self, node: int, returned: int) -> int:
        free = self._free(node, returned)
        if self._counts_slots:
            return free
        return 1 if free >= self._per_node else 0
