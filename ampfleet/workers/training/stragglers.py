"""Stragglers: a rank whose compute time per step stays above the others'.

In data-parallel training every rank waits for the slowest in each collective, so step time
alone cannot tell who is slow: each rank's own compute time (forward, backward, optimizer,
without the waits) can. Rank 0 sees every rank's on each reported step (one all_reduce,
reporting.py) and compares each rank with the median of the others. A rank above `factor`
times that median on `reports` reported steps in a row is a straggler (one event, when it
becomes one and when it stops being one); the ratio of the slowest is a metric every
reported step.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class StragglerWatch:
    factor: float
    """A rank this many times slower than the median of the others is slow."""
    reports: int
    """Reported steps in a row a rank must be slow to be called a straggler."""
    host_of: dict[int, str] = field(default_factory=dict)
    """Where each rank runs, for the event (rank -> node), where known."""
    _slow_for: dict[int, int] = field(default_factory=dict)
    _straggling: set[int] = field(default_factory=set)

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
            slow = ratio > self.factor
            self._slow_for[rank] = self._slow_for.get(rank, 0) + 1 if slow else 0
            where = f" on {self.host_of[rank]}" if rank in self.host_of else ""
            if self._slow_for[rank] >= self.reports and rank not in self._straggling:
                self._straggling.add(rank)
                events.append(
                    f"rank {rank}{where} is a straggler: its compute time per step has been "
                    f"above {self.factor:g}x the other ranks' median for {self.reports} "
                    f"reported steps ({ratio:.2f}x at step {step}); every rank waits for it"
                )
            elif not slow and rank in self._straggling:
                self._straggling.discard(rank)
                events.append(
                    f"rank {rank}{where} keeps pace again ({ratio:.2f}x the others' median "
                    f"at step {step})"
                )
        return worst, events
