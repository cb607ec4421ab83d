"""Stragglers: a rank whose compute time per step stays above the others'.

In data-parallel training every rank waits for the slowest in each collective, so step time
alone cannot tell who is slow: each rank's own compute time (forward, backward, optimizer,
without the waits) can. Rank 0 sees every rank's on each reported step (one all_reduce,
reporting.py) and compares each rank with the median of the others; the ratio of the slowest
is a metric every reported step.

Whether a rank is a straggler has hysteresis, so that noise on a shared machine (a rank's
ratio wandering around the factor) is not an alarm that rings on and off: a rank above
`factor` times the others' median on `reports` reported steps in a row becomes a straggler
(one event), and stops being one (another event) only once it is back near the others, at
or below `keeps_pace`, on `reports` reported steps in a row. A step in between, or a single
fast or slow one, changes nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


def keeps_pace_below(factor: float) -> float:
    """The ratio a straggler must come back to: halfway from the factor to the others' pace."""
    return 1.0 + (factor - 1.0) / 2


@dataclass
class StragglerWatch:
    factor: float
    """A rank this many times slower than the median of the others is slow."""
    reports: int
    """Reported steps in a row a rank must be slow to be called a straggler, and back at
    pace to stop being one."""
    host_of: dict[int, str] = field(default_factory=dict)
    """Where each rank runs, for the event (rank -> node), where known."""
    _streak: dict[int, int] = field(default_factory=dict)
    """Reported steps in a row each rank has looked other than it is called: slow for one
    that is not a straggler, at pace for one that is."""
    _straggling: set[int] = field(default_factory=set)

    @property
    def keeps_pace(self) -> float:
        return keeps_pace_below(self.factor)

    def observe(self, step: int, compute_s: list[float]) -> tuple[float | None, list[str]]:
        """The slowest rank's compute time over the median of the others' (None with one
        rank), and the events this step brings."""
        if len(compute_s) < 2:
            return None, []
        events, worst = [], 0.0
        for rank, seconds in enumerate(compute_s):
            others = statistics.median(compute_s[:rank] + compute_s[rank + 1 :])
            ratio = seconds / others if others > 0 else 1.0
            worst = max(worst, ratio)
            event = self._judge(rank, ratio, step)
            if event is not None:
                events.append(event)
        return worst, events

    def _judge(self, rank: int, ratio: float, step: int) -> str | None:
        straggling = rank in self._straggling
        other_than_called = ratio <= self.keeps_pace if straggling else ratio > self.factor
        self._streak[rank] = self._streak.get(rank, 0) + 1 if other_than_called else 0
        if self._streak[rank] < self.reports:
            return None
        self._streak[rank] = 0
        where = f" on {self.host_of[rank]}" if rank in self.host_of else ""
        if straggling:
            self._straggling.discard(rank)
            return (
                f"rank {rank}{where} keeps pace again: at most {self.keeps_pace:g}x the other "
                f"ranks' median for {self.reports} reported steps ({ratio:.2f}x at step {step})"
            )
        self._straggling.add(rank)
        return (
            f"rank {rank}{where} is a straggler: its compute time per step has been "
            f"above {self.factor:g}x the other ranks' median for {self.reports} "
            f"reported steps ({ratio:.2f}x at step {step}); every rank waits for it"
        )
