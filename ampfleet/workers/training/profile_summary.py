"""What a profile's summary says, from what one rank measured over the captured steps: time
by phase (the loop's own timer, as every reported step has it), the backward pass's share of
the step, the top operators by self time, and how much communication ran under compute.

Overlap comes from the rank's trace as written (Chrome trace format): on a GPU, NCCL kernels
against every other kernel; on the CPU, gloo's and c10d's operations against the aten
operators outside them. Each side is the union of its intervals, so nested operators and
parallel streams count once; `hidden_share` is the part of the communication time that had
compute running beside it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

TOP_OPERATORS = 15
OWN_ANNOTATION = "ampfleet:"
"""The loop's own ranges in the trace (steps and phases): not operators."""
_COMM_CPU = re.compile(r"^(gloo|nccl|mpi|ucc):|^c10d::")
_US = 1e-6
Span = tuple[float, float]


class OperatorAverage(Protocol):
    """What the summary reads of `torch.profiler.profile.key_averages()`'s entries (times in
    microseconds)."""

    key: str
    count: int
    self_cpu_time_total: float
    cpu_time_total: float


def phase_times(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over the captured steps: each is `{"seconds": {phase: s}, "step_time_s": s}`."""
    count = max(len(steps), 1)
    step_time = sum(float(s["step_time_s"]) for s in steps) / count
    phases: dict[str, float] = {}
    for step in steps:
        for phase, seconds in step["seconds"].items():
            phases[phase] = phases.get(phase, 0.0) + float(seconds) / count
    shares = {phase: seconds / step_time for phase, seconds in phases.items()} if step_time else {}
    return {
        "step_time_s": step_time,
        "phases_s": phases,
        "shares": shares,
        "backward_share": shares.get("backward"),
    }


def top_operators(
    averages: Iterable[OperatorAverage], on_device: bool, count: int = TOP_OPERATORS
) -> list[dict[str, Any]]:
    """The operators with the most self time: on the device where there is one, else on
    the CPU (the loop's own annotations left out)."""

    def device_self(entry: OperatorAverage) -> float:
        return float(getattr(entry, "self_device_time_total", 0.0) or 0.0)

    rank_by = device_self if on_device else (lambda e: float(e.self_cpu_time_total))
    kept = [e for e in averages if not e.key.startswith(OWN_ANNOTATION)]
    kept.sort(key=rank_by, reverse=True)
    rows = []
    for entry in kept[:count]:
        row: dict[str, Any] = {
            "name": entry.key,
            "calls": int(entry.count),
            "self_cpu_s": float(entry.self_cpu_time_total) * _US,
            "cpu_total_s": float(entry.cpu_time_total) * _US,
        }
        if on_device:
            row["self_device_s"] = device_self(entry) * _US
        rows.append(row)
    return rows


def merged(spans: Iterable[Span]) -> list[Span]:
    """The union of intervals, as disjoint intervals in order."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(spans: Sequence[Span]) -> float:
    return sum(end - start for start, end in spans)


def intersection(a: Sequence[Span], b: Sequence[Span]) -> float:
    """The length two unions of intervals (each `merged`) have in common."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, end - start)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _span(event: dict[str, Any]) -> Span:
    start = float(event["ts"])
    return start, start + float(event.get("dur", 0.0))


def _inside(spans: Sequence[Span], starts: Sequence[float], point: float) -> bool:
    index = bisect.bisect_right(starts, point) - 1
    return index >= 0 and spans[index][0] <= point <= spans[index][1]


def _cpu_sides(events: list[dict[str, Any]]) -> tuple[list[Span], list[Span]]:
    """(communication, compute) on the CPU: gloo's and c10d's operations, and the aten
    operators that are not part of one of them (on the same thread)."""
    comm_by_thread: dict[Any, list[Span]] = {}
    for event in events:
        if _COMM_CPU.match(str(event.get("name", ""))):
            comm_by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(_span(event))
    merged_by_thread = {thread: merged(spans) for thread, spans in comm_by_thread.items()}
    starts = {thread: [s for s, _ in spans] for thread, spans in merged_by_thread.items()}
    compute = []
    for event in events:
        if event.get("cat") != "cpu_op" or not str(event.get("name", "")).startswith("aten::"):
            continue
        span = _span(event)
        thread = (event.get("pid"), event.get("tid"))
        middle = (span[0] + span[1]) / 2
        if thread in merged_by_thread and _inside(merged_by_thread[thread], starts[thread], middle):
            continue
        compute.append(span)
    return [s for spans in comm_by_thread.values() for s in spans], compute


def overlap(trace_events: Iterable[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Compute and communication time per captured step, and the share of communication
    that ran beside compute."""
    events = [e for e in trace_events if e.get("ph") == "X" and "ts" in e]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:
        basis = "device kernels"
        comm = [_span(e) for e in kernels if "nccl" in str(e.get("name", "")).lower()]
        compute = [_span(e) for e in kernels if "nccl" not in str(e.get("name", "")).lower()]
    else:
        basis = "cpu operators"
        comm, compute = _cpu_sides(events)
    comm_union, compute_union = merged(comm), merged(compute)
    communication = length(comm_union)
    hidden = intersection(comm_union, compute_union)
    per_step = _US / max(steps, 1)
    return {
        "basis": basis,
        "compute_s": length(compute_union) * per_step,
        "communication_s": communication * per_step,
        "overlapped_s": hidden * per_step,
        "hidden_share": hidden / communication if communication else None,
    }


def combine(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole profile's figures: each traced rank's, and their means."""
    ranks = [e for e in entries if "phases" in e]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    hidden = [
        float(e["overlap"]["hidden_share"])
        for e in ranks
        if (e.get("overlap") or {}).get("hidden_share") is not None
    ]
    return {
        "step_time_s": mean([float(e["phases"]["step_time_s"]) for e in ranks]),
        "backward_share": mean(
            [float(e["phases"]["backward_share"]) for e in ranks if e["phases"]["backward_share"]]
        ),
        "communication_hidden_share": mean(hidden),
    }
