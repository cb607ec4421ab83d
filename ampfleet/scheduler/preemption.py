"""Choosing preemption victims: the fewest running jobs whose slots make a waiting job fit.

Only strictly lower priority is taken, lowest priority and latest start first (the least
work lost). Jobs already exiting from an earlier pass's preemption are taken before any
other: their slots come back anyway, so they cost nothing. The fewest is searched greedily
two ways, each pruned to a set where every victim is needed: in order of preference, and by
most matching slots (which wins only when it needs fewer victims). Exact minimum sets are a
set cover; this is the cheap bound.

The pass (`ampfleet.scheduler.placement`) owns what has been claimed so far and what the
free slots are; this module only searches, on an `Overlay` of those free slots.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ampfleet.scheduler.capacity_index import Overlay


@dataclass(frozen=True)
class RunningJob:
    """A job holding slots, as a pass sees it: what taking them back would cost."""

    id: str
    project: str
    priority: int
    allocations: Mapping[str, int]
    """Node id -> slots held."""
    estimated_end: float | None
    """Epoch seconds, from progress; None when unknown."""
    started: float
    preempting: bool = False
    """Already told to checkpoint and exit by an earlier pass. Its slots come back soon, so it
    is never chosen again: a job that needs room takes those slots first, at no new cost,
    and the job it was preempted for (first in order again) finds the same room waiting."""


Allocations = Mapping[str, Sequence[tuple[int, int]]]
"""Running job id -> (node number, slots) it holds."""


class Preemptible:
    """The running jobs a pass may take slots back from, in the order it prefers them."""

    def __init__(
        self,
        running: Sequence[RunningJob],
        allocations: Allocations,
        *,
        group_of: Callable[[int], int | None],
        allow_preemption: bool,
    ) -> None:
        self._allocations = allocations
        self._group_of = group_of
        self.exiting = sorted(
            (job for job in running if job.preempting), key=lambda job: (-job.started, job.id)
        )
        self._by_preference = (
            sorted(
                (job for job in running if not job.preempting),
                key=lambda job: (job.priority, -job.started, job.id),
            )
            if allow_preemption
            else []
        )
        self._lowest_priority = min((job.priority for job in self._by_preference), default=None)
        self._largest_first_cache: dict[tuple[int, ...], list[RunningJob]] = {}

    def worth_searching(self, priority: int) -> bool:
        """Whether any victim could exist for a job of `priority`."""
        lower = self._lowest_priority is not None and priority > self._lowest_priority
        return lower or bool(self.exiting)

    def fewest_victims(
        self,
        priority: int,
        groups: tuple[int, ...],
        overlay: Callable[[], Overlay],
        claimed: Callable[[str], bool],
    ) -> list[RunningJob] | None:
        """Victims whose slots make the job fit on a fresh `overlay()`, or None if none do.
        Jobs `claimed` this pass (victims of another job, or under the reservation, whose
        slots it counts on) are never chosen."""
        by_preference = self._prune(overlay(), self._candidates(priority, claimed))
        if by_preference is None or _cost(by_preference) <= 1:
            return by_preference
        by_size = _unclaimed(self._largest_first(groups), claimed, below=priority)
        fewer = self._prune(overlay(), itertools.chain(_unclaimed(self.exiting, claimed), by_size))
        if fewer is not None and _cost(fewer) < _cost(by_preference):
            return fewer
        return by_preference

    def _candidates(self, priority: int, claimed: Callable[[str], bool]) -> Iterator[RunningJob]:
        """Possible victims, most preferred first: jobs already exiting cost nothing."""
        yield from _unclaimed(self.exiting, claimed)
        lower = itertools.takewhile(lambda v: v.priority < priority, self._by_preference)
        yield from _unclaimed(lower, claimed)

    def _largest_first(self, groups: tuple[int, ...]) -> list[RunningJob]:
        """Running jobs by slots on these groups' nodes, most first; ties by preference."""
        ordered = self._largest_first_cache.get(groups)
        if ordered is None:
            matching = set(groups)

            def matching_slots(victim: RunningJob) -> int:
                allocations = self._allocations[victim.id]
                return sum(s for n, s in allocations if self._group_of(n) in matching)

            ordered = sorted(self._by_preference, key=matching_slots, reverse=True)
            self._largest_first_cache[groups] = ordered
        return ordered

    def _prune(self, overlay: Overlay, candidates: Iterable[RunningJob]) -> list[RunningJob] | None:
        """Candidates in order until the job fits, then without any that turned out unneeded."""
        chosen: list[RunningJob] = []
        for victim in candidates:
            if overlay.return_slots(self._allocations[victim.id]):
                chosen.append(victim)
                if overlay.fits():
                    break
        else:
            return None
        for i in reversed(range(len(chosen) - 1)):  # the last one added is always needed
            allocations = self._allocations[chosen[i].id]
            overlay.withdraw(allocations)
            if overlay.fits():
                del chosen[i]
            else:
                overlay.return_slots(allocations)
        return chosen


def _cost(victims: Iterable[RunningJob]) -> int:
    """New preemptions a choice of victims takes: jobs already exiting are free."""
    return sum(1 for victim in victims if not victim.preempting)


def _unclaimed(
    running: Iterable[RunningJob], claimed: Callable[[str], bool], below: int | None = None
) -> Iterator[RunningJob]:
    """Those not `claimed`, of priority below `below` when given."""
    for victim in running:
        if below is not None and victim.priority >= below:
            continue
        if not claimed(victim.id):
            yield victim
