"""Progress read off a plain script's printed lines (rank 0's stdout), the only way the
platform learns how far a script that does not use `ampfleet.train` got.

Recognised, anywhere in a line, case-insensitive (README: "Script mode"):

    step 12/100     step 12 of 100 steps, a total known
    step=12         step 12 (also `step: 12`, `step 12`)

and, on such a line, metrics as `name=value` (`loss=0.42 lr=3e-4`) or `loss 0.42` (the
platform's own log format). A line without a step says nothing; the step never goes back
within an attempt (a line re-printed is not progress).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_STEP = re.compile(r"\bstep\s*[=:]?\s*(\d{1,18})(?:\s*/\s*(\d{1,18}))?", re.IGNORECASE)
_PAIR = re.compile(
    r"(?<![\w.])([A-Za-z_][A-Za-z0-9_./-]{0,63})\s*[=:]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
)
_LOSS = re.compile(r"\bloss\s+([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\b")
MAX_METRICS_PER_LINE = 32
NOT_METRICS = frozenset({"step", "steps", "epoch", "rank", "total_steps"})


@dataclass(frozen=True)
class Report:
    step: int
    total_steps: int | None
    metrics: dict[str, float] = field(default_factory=dict)


def parse_line(line: str) -> Report | None:
    """What one printed line says of the run's progress, or None."""
    found = _STEP.search(line)
    if found is None:
        return None
    step = int(found.group(1))
    total = int(found.group(2)) if found.group(2) else None
    metrics: dict[str, float] = {}
    loss = _LOSS.search(line)
    if loss:
        metrics["loss"] = float(loss.group(1))
    for name, value in _PAIR.findall(line):
        if name.lower() not in NOT_METRICS and len(metrics) < MAX_METRICS_PER_LINE:
            metrics[name] = float(value)
    finite = {name: value for name, value in metrics.items() if math.isfinite(value)}
    return Report(step, total if total and total >= step else None, finite)


class ProgressReader:
    """Reports from lines as they come, each a step past the last one reported."""

    def __init__(self, resumed_from: int = 0) -> None:
        self.step = resumed_from
        self.total_steps: int | None = None
        self.reported_any = False

    def feed(self, lines: list[str]) -> list[Report]:
        reports = []
        for line in lines:
            report = parse_line(line)
            if report is None or (self.reported_any and report.step <= self.step):
                continue
            self.step, self.reported_any = report.step, True
            self.total_steps = report.total_steps or self.total_steps
            reports.append(report)
        return reports
