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

A gap must also be sustained in time: the streak must span `sustained_s` seconds from its
first report. Two healthy ranks that share a busy machine's cores take turns being slow for
seconds at a time (another process on one core, a page-cache miss, a checkpoint write); with
frequent reports a few reports in a row last under a second, and such a turn was named a
straggler on almost every run. A rank that really is slower (a throttled or degraded device,
a node with a noisy neighbour) stays slower for minutes, which is what the event is for.
"""

from __future__ import annotations

import statistics
import time
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
    sustained_s: float = 0.0
    """Seconds that streak must also span, from its first report to the deciding one."""
    _streak: dict[int, int] = field(default_factory=dict)
    """Reported steps in a row each rank has looked other than it is called: slow for one
    that is not a straggler, at pace for one that is."""
    _streak_since: dict[int, float] = field(default_factory=dict)
    """When each rank's current streak began (time.monotonic())."""
    _straggling: set[int] = field(default_factory=set)

    @property
    def keeps_pace(self) -> float:
        return keeps_pace_below(self.factor)

    def observe(
        self, step: int, compute_s: list[float], now: float | None = None
    ) -> tuple[float | None, list[str]]:
        """The slowest rank's compute time over the median of the others' (None with one
        rank), and the events this step brings. `now`: the report's time.monotonic()."""
        if len(compute_s) < 2:
            return None, []
        now = time.monotonic() if now is None else now
        events, worst = [], 0.0
        for rank, seconds in enumerate(compute_s):
            others = statistics.median(compute_s[:rank] + compute_s[rank + 1 :])
            ratio = seconds / others if others > 0 else 1.0
            worst = max(worst, ratio)
            event = self._judge(rank, ratio, step, now)
            if event is not None:
                events.append(event)
        return worst, events

    def _judge(self, rank: int, ratio: float, step: int, now: float) -> str | None:
        straggling = rank in self._straggling
        other_than_called = ratio <= self.keeps_pace if straggling else ratio > self.factor
        if not other_than_called:
            self._streak[rank] = 0
            return None
        if self._streak.get(rank, 0) == 0:
            self._streak_since[rank] = now
        self._streak[rank] = self._streak.get(rank, 0) + 1
        lasted = now - self._streak_since[rank]
        if self._streak[rank] < self.reports or lasted < self.sustained_s:
            return None
        self._streak[rank] = 0
        held = f" for {lasted:.0f} s" if self.sustained_s else ""
        where = f" on {self.host_of[rank]}" if rank in self.host_of else ""
        if straggling:
            self._straggling.discard(rank)
            return (
                f"rank {rank}{where} keeps pace again: at most {self.keeps_pace:g}x the other "
                f"ranks' median for {self.reports} reported steps{held} "
                f"({ratio:.2f}x at step {step})"
            )
        self._straggling.add(rank)
        return (
            f"rank {rank}{where} is a straggler: its compute time per step has been "
            f"above {self.factor:g}x the other ranks' median for {self.reports} "
            f"reported steps{held} ({ratio:.2f}x at step {step}); every rank waits for it"
        )
