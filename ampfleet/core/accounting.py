"""What an attempt's time went to, as the training loop counts it: the half of goodput that
only the loop can tell (core/goodput.py adds the allocation rows, which say how long the
slots were held).

The loop knows which seconds were training steps, which ones blocked on a checkpoint and
which ones evaluated. What it cannot know is how many of its steps a later attempt will
compute again: that depends on the checkpoint the next attempt resumes from, and the metric
points of those steps are replaced when it does, so they cannot be counted afterwards. So
the clock marks, at each checkpoint it saves, the step-seconds spent up to it; whoever sees
the next attempt start (the ingest of its `started` record) reads off how much of this
attempt was kept.

Cheap: two `perf_counter` calls per step, and one small record with each progress record.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_MARKS = 16
"""Saves remembered: a resume point is one of the last published checkpoints, which are
at most `keep_last_checkpoints` (bounded far below this in practice) of the latest saves."""


@dataclass
class AttemptClock:
    resumed_from: int
    """The step this attempt began at (its checkpoint's, or 0)."""
    first_step_at: float | None = None
    """Epoch seconds as its first step began: start-up ends there."""
    step_s: float = 0.0
    """Seconds in training steps that still stand (reports and profiling included)."""
    recomputed_s: float = 0.0
    """Seconds in steps this attempt threw away itself (a precision fallback's rewind)."""
    checkpoint_s: float = 0.0
    """Seconds training waited for a checkpoint (the snapshot; the persisting is async)."""
    eval_s: float = 0.0
    marks: list[tuple[int, float]] = field(default_factory=list)
    """(step, step_s as it was saved) for the latest saves."""

    @contextlib.contextmanager
    def stepping(self) -> Iterator[None]:
        if self.first_step_at is None:
            self.first_step_at = time.time()
        with self._adding_to("step_s"):
            yield

    def checkpointing(self) -> contextlib.AbstractContextManager[None]:
        return self._adding_to("checkpoint_s")

    def evaluating(self) -> contextlib.AbstractContextManager[None]:
        return self._adding_to("eval_s")

    @contextlib.contextmanager
    def _adding_to(self, seconds: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, seconds, getattr(self, seconds) + time.perf_counter() - started)

    def saved(self, step: int) -> None:
        self.marks = [*(m for m in self.marks if m[0] != step), (step, self.step_s)][-MAX_MARKS:]

    def rewound(self, step: int, reached: int) -> None:
        """The loop went back from `reached` to its checkpoint of `step`: the steps between
        are lost."""
        standing = step_seconds_up_to(step, self.resumed_from, self.marks, reached, self.step_s)
        self.recomputed_s += self.step_s - standing
        self.step_s = standing
        self.marks = [m for m in self.marks if m[0] <= step]

    def record(self, step: int) -> dict[str, Any]:
        """The fields of a `usage` record at `step`."""
        return {
            "step": step,
            "resumed_from_step": self.resumed_from,
            "first_step_at": self.first_step_at,
            "step_s": round(self.step_s, 6),
            "recomputed_s": round(self.recomputed_s, 6),
            "checkpoint_s": round(self.checkpoint_s, 6),
            "eval_s": round(self.eval_s, 6),
            "marks": [[s, round(t, 6)] for s, t in self.marks],
        }


def step_seconds_up_to(
    step: int,
    resumed_from: int,
    marks: list[tuple[int, float]] | list[list[float]],
    reached: int,
    step_s: float,
) -> float:
    """Of an attempt's `step_s`, the seconds spent reaching `step`: exact at a saved step,
    all of it at or past the step it reached, none at or before its start, and between two
    known points in proportion to the steps (a resume point is nearly always a mark)."""
    if step <= resumed_from:
        return 0.0
    if step >= reached:
        return step_s
    known = sorted(
        [(float(resumed_from), 0.0), *((float(s), float(t)) for s, t in marks), (reached, step_s)]
    )
    for (s0, t0), (s1, t1) in itertools.pairwise(known):
        if s0 <= step <= s1:
            return t0 if s1 == s0 else t0 + (t1 - t0) * (step - s0) / (s1 - s0)
    return step_s  # unreachable: the known points span resumed_from..reached
