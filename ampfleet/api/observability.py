"""Prometheus exposition: this API process's request series, and the fleet's series.

Fleet series (jobs, queue, slots, nodes, scheduling latency, jobs submitted and finished,
metric points ingested, goodput) are read from
the database at scrape time, so every API process exports the same values: aggregate them
across replicas with `max without (instance)`, never `sum`. Their counters live in the
database (core/counters.py) and only go up; the request series are this process's own.
Written by hand: the text format is small.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core import counters, goodput
from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.fleet import is_alive
from ampfleet.core.models import Job, JobEvent, Node, utcnow
from ampfleet.core.states import TERMINAL_STATES, JobState

MB = 1024 * 1024
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
NODE_STATES = ("ready", "cordoned")
NODE_TELEMETRY = {  # its key: the series, the factor to base units, what it is
    "ranks": ("ampfleet_node_ranks", 1.0, "Rank processes sampled at the last heartbeat."),
    "cpu_percent": ("ampfleet_node_cpu_cores_used", 0.01, "CPU cores the node's ranks use."),
    "rss_mb": ("ampfleet_node_rank_memory_bytes", MB, "Resident memory of the node's ranks."),
    "gpu_util_percent": (
        "ampfleet_node_gpu_utilization_ratio",
        0.01,
        "GPU utilisation of the node's ranks (NVML), averaged over them, 0-1.",
    ),
    "gpu_memory_mb": ("ampfleet_node_gpu_memory_bytes", MB, "GPU memory held by its ranks."),
}
"""The node agent's telemetry of its ranks (workers/telemetry.py `node_totals`), in the
base units Prometheus names want."""
FLEET_NOTE = "Fleet-wide: the same on every API process."


def label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def histogram_lines(
    name: str, labels: str, bounds: Sequence[float], counts: Sequence[float], total: float
) -> list[str]:
    """`counts` per bucket (the last one past every bound), made cumulative here."""
    prefix = f"{labels}," if labels else ""
    out, running = [], 0.0
    for bound, count in zip((*bounds, "+Inf"), counts, strict=True):
        running += count
        out.append(f'{name}_bucket{{{prefix}le="{bound}"}} {running:g}')
    scope = f"{{{labels}}}" if labels else ""
    out.append(f"{name}_count{scope} {running:g}")
    out.append(f"{name}_sum{scope} {total:.6f}")
    return out


class HttpMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[tuple[str, str], list[int]] = defaultdict(
            lambda: [0] * (len(LATENCY_BUCKETS) + 1)
        )
        self.sums: dict[tuple[str, str], float] = defaultdict(float)

    def observe(
        self, method: str, route: str, status: int, seconds: float, *, stream: bool = False
    ) -> None:
        """A live stream is counted but kept out of the duration histogram: it lasts as long
        as its client stays, which says nothing about how fast requests are answered."""
        with self._lock:
            self.requests[(method, route, status)] += 1
            if stream:
                return
            index = next(
                (i for i, bound in enumerate(LATENCY_BUCKETS) if seconds <= bound),
                len(LATENCY_BUCKETS),
            )
            self.buckets[(method, route)][index] += 1
            self.sums[(method, route)] += seconds

    def lines(self) -> list[str]:
        out = _family(
            "ampfleet_http_requests_total", "counter", "HTTP requests served by this API process."
        )
        with self._lock:
            for (method, route, status), count in sorted(self.requests.items()):
                out.append(
                    f'ampfleet_http_requests_total{{method="{method}",'
                    f'route="{label_value(route)}",status="{status}"}} {count}'
                )
            out += _family(
                "ampfleet_http_request_duration_seconds",
                "histogram",
                "Time to answer a request (live event streams excluded).",
            )
            for (method, route), counts in sorted(self.buckets.items()):
                out += histogram_lines(
                    "ampfleet_http_request_duration_seconds",
                    f'method="{method}",route="{label_value(route)}"',
                    LATENCY_BUCKETS,
                    counts,
                    self.sums[(method, route)],
                )
        return out


http_metrics = HttpMetrics()


def nearest_rank(ordered: Sequence[float], quantile: float) -> float:
    """The `quantile` of values already sorted, by nearest rank (no interpolation)."""
    return ordered[min(int(quantile * len(ordered)), len(ordered) - 1)]


def fleet_lines(session: Session, node_timeout_s: float, goodput_window_s: float) -> list[str]:
    out = _family("ampfleet_jobs", "gauge", f"Jobs by state. {FLEET_NOTE}")
    counts = dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all())
    for state in JobState:
        out.append(f'ampfleet_jobs{{state="{state.value}"}} {counts.get(state.value, 0)}')
    out += _family("ampfleet_queue_depth", "gauge", f"Jobs waiting to be placed. {FLEET_NOTE}")
    out.append(f"ampfleet_queue_depth {counts.get(JobState.QUEUED.value, 0)}")
    out += queue_wait_lines(session)

    totals = counters.totals(session)
    out += job_counter_lines(totals)
    latency = counters.SCHEDULING_LATENCY
    out += _family(
        "ampfleet_scheduling_latency_seconds",
        "histogram",
        f"Submit to first placement. {FLEET_NOTE}",
    )
    buckets = [str(b) for b in counters.SCHEDULING_LATENCY_BUCKETS] + [counters.INF]
    out += histogram_lines(
        "ampfleet_scheduling_latency_seconds",
        "",
        counters.SCHEDULING_LATENCY_BUCKETS,
        [totals.get((latency, b), 0.0) for b in buckets],
        totals.get((latency, counters.SUM), 0.0),
    )
    ingested = totals.get((counters.METRIC_POINTS_INGESTED, ""), 0.0)
    out += _family(
        "ampfleet_metric_points_ingested_total",
        "counter",
        f"Metric points stored from the ranks' reports. {FLEET_NOTE}",
    )
    out.append(f"ampfleet_metric_points_ingested_total {ingested:g}")
    out += node_lines(session, node_timeout_s)
    out += goodput_lines(session, goodput_window_s)
    return out


def job_counter_lines(totals: dict[tuple[str, str], float]) -> list[str]:
    """Counted as jobs are submitted and end (core/lifecycle.py), so deleting jobs lowers
    neither; every final state has its series from the start, so `rate()` sees the first."""
    out = _family(
        "ampfleet_jobs_submitted_total", "counter", f"Jobs accepted by a submit. {FLEET_NOTE}"
    )
    out.append(f"ampfleet_jobs_submitted_total {totals.get((counters.JOBS_SUBMITTED, ''), 0):g}")
    out += _family(
        "ampfleet_jobs_finished_total", "counter", f"Jobs that ended, by final state. {FLEET_NOTE}"
    )
    for state in sorted(TERMINAL_STATES):
        value = totals.get((counters.JOBS_FINISHED, state.value), 0)
        out.append(f'ampfleet_jobs_finished_total{{state="{state.value}"}} {value:g}')
    return out


def queue_wait_lines(session: Session) -> list[str]:
    """How long the longest-waiting queued job has waited: since it last entered QUEUED
    (submitted or requeued), or since its restart backoff ended; 0 with an empty queue. The
    scheduling latency histogram sees a wait only once it ends; this sees a stuck queue."""
    entered = (
        select(Job.id, Job.not_before, func.max(JobEvent.time))
        .join(JobEvent, JobEvent.job_id == Job.id)
        .where(Job.state == JobState.QUEUED.value, JobEvent.to_state == JobState.QUEUED.value)
        .group_by(Job.id, Job.not_before)
    )
    now = utcnow()
    waits = [
        (now - max(queued, not_before or queued)).total_seconds()
        for _, not_before, queued in session.execute(entered)
    ]
    out = _family(
        "ampfleet_queue_oldest_wait_seconds",
        "gauge",
        f"Seconds the longest-waiting queued job has been ready to place. {FLEET_NOTE}",
    )
    out.append(f"ampfleet_queue_oldest_wait_seconds {max([0.0, *waits]):.3f}")
    return out


def goodput_lines(session: Session, window_s: float) -> list[str]:
    """Per project and kind: a series per project that has jobs in the window (projects
    are created by operators, so the label set is theirs and small)."""
    window = f"jobs submitted in the last {window_s:.0f} s"
    slot_s = _family(
        "ampfleet_project_slot_seconds",
        "gauge",
        f"Slot-seconds held by a project's {window}, by where they went (allocated is the "
        f"sum of the others). {FLEET_NOTE}",
    )
    ratio = _family(
        "ampfleet_project_goodput_ratio",
        "gauge",
        f"Training slot-seconds per allocated one, of a project's {window}. {FLEET_NOTE}",
    )
    for project, totals in sorted(goodput.by_project(session, window_s).items()):
        name = f'project="{label_value(project)}"'
        for kind in ("allocated", *goodput.KINDS):
            value = getattr(totals, f"{kind}_slot_s")
            slot_s.append(f'ampfleet_project_slot_seconds{{{name},kind="{kind}"}} {value:.3f}')
        if totals.ratio is not None:
            ratio.append(f"ampfleet_project_goodput_ratio{{{name}}} {totals.ratio:.4f}")
    return slot_s + ratio


def node_lines(session: Session, node_timeout_s: float) -> list[str]:
    """One series per node and fact, so cordoning a node changes values, never series."""
    now = utcnow()
    nodes = list(session.scalars(select(Node).order_by(Node.id)))
    used = used_slots_by_node(session)
    slots = _family("ampfleet_node_slots", "gauge", f"Rank slots of a node. {FLEET_NOTE}")
    busy = _family(
        "ampfleet_node_slots_used", "gauge", f"Rank slots allocated on a node. {FLEET_NOTE}"
    )
    up = _family("ampfleet_node_up", "gauge", f"1 if the node's heartbeat is recent. {FLEET_NOTE}")
    states = _family(
        "ampfleet_node_state", "gauge", f"1 for the node's state, 0 for the others. {FLEET_NOTE}"
    )
    usage = {
        kind: _family(series, "gauge", f"{what} {FLEET_NOTE}")
        for kind, (series, _, what) in NODE_TELEMETRY.items()
    }
    live_slots = live_used = 0
    for node in nodes:
        name = f'node="{label_value(node.id)}"'
        alive = is_alive(node.last_heartbeat_at, now, node_timeout_s)
        if alive:
            live_slots += node.slots
            live_used += used.get(node.id, 0)
        slots.append(f"ampfleet_node_slots{{{name}}} {node.slots}")
        busy.append(f"ampfleet_node_slots_used{{{name}}} {used.get(node.id, 0)}")
        up.append(f"ampfleet_node_up{{{name}}} {int(alive)}")
        for state in NODE_STATES:
            states.append(
                f'ampfleet_node_state{{{name},state="{state}"}} {int(node.state == state)}'
            )
        # Stale figures of a dead node would look like a busy one: zero once it is silent.
        measured = (node.telemetry or {}) if alive else {}
        for kind, lines in usage.items():
            if kind.startswith("gpu_") and node.accelerator != "cuda":
                continue  # a CPU node has no such series at all, rather than a constant 0
            series, factor, _ = NODE_TELEMETRY[kind]
            lines.append(f"{series}{{{name}}} {float(measured.get(kind, 0.0)) * factor:.15g}")
    fleet = slot_lines(live_slots, live_used)
    return fleet + slots + busy + up + states + [line for lines in usage.values() for line in lines]


def slot_lines(total: int, used: int) -> list[str]:
    """The fleet's utilisation: slots of the nodes that are up (cordoned ones too, which
    still run what they hold), and how many of them allocations hold."""
    live = "of the nodes whose heartbeat is recent"
    out = _family("ampfleet_slots", "gauge", f"Rank slots {live}. {FLEET_NOTE}")
    out.append(f"ampfleet_slots {total}")
    out += _family("ampfleet_slots_used", "gauge", f"Allocated rank slots {live}. {FLEET_NOTE}")
    out.append(f"ampfleet_slots_used {used}")
    out += _family(
        "ampfleet_slots_utilization_ratio",
        "gauge",
        f"Allocated per available rank slot {live}, 0-1 (0 with none). {FLEET_NOTE}",
    )
    out.append(f"ampfleet_slots_utilization_ratio {used / total if total else 0.0:.4f}")
    return out
