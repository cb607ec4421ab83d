"""Prometheus exposition: fleet gauges read from the database at scrape time, plus this
API process's own request counters. Written by hand: the text format is small."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.models import Job, Metric, Node, utcnow
from ampfleet.core.states import JobState

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WINDOW = timedelta(minutes=15)


class HttpMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[tuple[str, str], list[int]] = defaultdict(
            lambda: [0] * (len(LATENCY_BUCKETS) + 1)
        )
        self.sums: dict[tuple[str, str], float] = defaultdict(float)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            index = next(
                (i for i, bound in enumerate(LATENCY_BUCKETS) if seconds <= bound),
                len(LATENCY_BUCKETS),
            )
            self.buckets[(method, route)][index] += 1
            self.sums[(method, route)] += seconds

    def lines(self) -> list[str]:
        out = [
            "# HELP ampfleet_http_requests_total HTTP requests served by this API process.",
            "# TYPE ampfleet_http_requests_total counter",
        ]
        with self._lock:
            for (method, route, status), count in sorted(self.requests.items()):
                out.append(
                    f'ampfleet_http_requests_total{{method="{method}",route="{route}",'
                    f'status="{status}"}} {count}'
                )
            out += [
                "# HELP ampfleet_http_request_duration_seconds Time to answer a request.",
                "# TYPE ampfleet_http_request_duration_seconds histogram",
            ]
            for (method, route), counts in sorted(self.buckets.items()):
                labels = f'method="{method}",route="{route}"'
                running = 0
                for bound, count in zip((*LATENCY_BUCKETS, "+Inf"), counts, strict=True):
                    running += count
                    out.append(
                        f'ampfleet_http_request_duration_seconds_bucket{{{labels},le="{bound}"}}'
                        f" {running}"
                    )
                out.append(f"ampfleet_http_request_duration_seconds_count{{{labels}}} {running}")
                out.append(
                    f"ampfleet_http_request_duration_seconds_sum{{{labels}}} "
                    f"{self.sums[(method, route)]:.6f}"
                )
        return out


http_metrics = HttpMetrics()


def nearest_rank(ordered: Sequence[float], quantile: float) -> float:
    """The `quantile` of values already sorted, by nearest rank (no interpolation)."""
    return ordered[min(int(quantile * len(ordered)), len(ordered) - 1)]


def fleet_lines(session: Session, node_timeout_s: float) -> list[str]:
    now = utcnow()
    out = ["# HELP ampfleet_jobs Jobs by state.", "# TYPE ampfleet_jobs gauge"]
    rows = session.execute(select(Job.state, func.count()).group_by(Job.state)).all()
    counts = dict(rows)
    for state in JobState:
        out.append(f'ampfleet_jobs{{state="{state.value}"}} {counts.get(state.value, 0)}')
    out += [
        "# HELP ampfleet_queue_depth Jobs waiting to be placed.",
        "# TYPE ampfleet_queue_depth gauge",
        f"ampfleet_queue_depth {counts.get(JobState.QUEUED.value, 0)}",
    ]
    waits = sorted(
        (scheduled - created).total_seconds()
        for created, scheduled in session.execute(
            select(Job.created_at, Job.scheduled_at).where(
                Job.scheduled_at.is_not(None), Job.scheduled_at > now - WINDOW
            )
        )
        if scheduled is not None
    )
    out += [
        "# HELP ampfleet_scheduling_latency_seconds Submit to placement, jobs placed in the "
        "last 15 minutes (first placement of each).",
        "# TYPE ampfleet_scheduling_latency_seconds summary",
    ]
    for quantile in (0.5, 0.9, 0.99):
        value = nearest_rank(waits, quantile) if waits else 0.0
        out.append(f'ampfleet_scheduling_latency_seconds{{quantile="{quantile}"}} {value:.6f}')
    out.append(f"ampfleet_scheduling_latency_seconds_count {len(waits)}")
    out.append(f"ampfleet_scheduling_latency_seconds_sum {sum(waits):.6f}")
    recent = (
        session.scalar(select(func.count()).where(Metric.time > now - timedelta(seconds=60))) or 0
    )
    out += [
        "# HELP ampfleet_metric_ingest_points_per_second Metric points stored, last 60 s.",
        "# TYPE ampfleet_metric_ingest_points_per_second gauge",
        f"ampfleet_metric_ingest_points_per_second {recent / 60:.3f}",
    ]
    used = used_slots_by_node(session)
    out += ["# HELP ampfleet_node_slots Slots per node.", "# TYPE ampfleet_node_slots gauge"]
    for node in session.scalars(select(Node).order_by(Node.id)):
        alive = (now - node.last_heartbeat_at).total_seconds() <= node_timeout_s
        labels = f'node="{node.id}",state="{node.state}",alive="{str(alive).lower()}"'
        out.append(f'ampfleet_node_slots{{{labels},kind="total"}} {node.slots}')
        out.append(f'ampfleet_node_slots{{{labels},kind="used"}} {used.get(node.id, 0)}')
    return out
