"""One node's launch of an attempt, as spans of the job's trace (core/tracing.py).

`ampfleet.launch` lasts from the start message to the ranks' spawn: the claim, fetching the
bundle, inputs and checkpoint, installing requirements, waiting for the rendezvous. Its
child `ampfleet.first_step`, on the node of rank 0 (the rank whose records the agent
ingests), lasts from the spawn to the first step rank 0 reports, with an event when the
ranks say they started. Ranks have no network, so the agent records this span from their
records, at the time a record gives when it lies between the spawn and now: a rank's clock
is the node's, but nothing a rank writes is trusted further than that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from ampfleet.core.tracing import parent_of, tracer

STEP_KINDS = ("progress", "metrics")


class LaunchTrace:
    def __init__(self, launch: Span, *, reports_steps: bool, spans: Tracer = tracer) -> None:
        """`spans`: where its first-step span comes from (the process's own tracer)."""
        self._launch = launch
        self._tracer = spans
        self._reports_steps = reports_steps
        self._first_step: Span | None = None
        self._spawned_ns = 0
        self._resumed_from = 0
        self._lock = threading.Lock()  # the agent's threads and the supervisor's meet here

    @classmethod
    def begin(
        cls,
        carrier: Mapping[str, str] | None,
        *,
        job_id: str,
        attempt: int,
        node: str,
        node_rank: int,
    ) -> LaunchTrace:
        attributes: dict[str, str | int] = {
            "ampfleet.job_id": job_id,
            "ampfleet.attempt": attempt,
            "ampfleet.node": node,
            "ampfleet.node_rank": node_rank,
        }
        span = tracer.start_span(
            "ampfleet.launch", context=parent_of(carrier), attributes=attributes
        )
        return cls(span, reports_steps=node_rank == 0)

    @classmethod
    def untraced(cls) -> LaunchTrace:
        return cls(trace.INVALID_SPAN, reports_steps=False)

    @contextmanager
    def current(self) -> Iterator[None]:
        """The launch span as the current one: log lines and statements are of it."""
        with trace.use_span(self._launch, end_on_exit=False):
            yield

    def not_launched(self, why: str) -> None:
        """A stale or duplicate message, a job cancelled meanwhile: nothing to launch."""
        with self._lock:
            if self._launch.is_recording():
                self._launch.set_attribute("ampfleet.launched", False)
                self._launch.add_event("not launched", {"reason": why})
            self._end_all()

    def failed(self, message: str) -> None:
        with self._lock:
            for span in (self._launch, self._first_step):
                if span is not None and span.is_recording():
                    span.set_status(Status(StatusCode.ERROR, message))
            self._end_all()

    def spawned(self) -> None:
        with self._lock:
            self._spawned_ns = time.time_ns()
            self._launch.set_attribute("ampfleet.launched", True)
            self._launch.end(self._spawned_ns)
            if self._reports_steps:
                self._first_step = self._tracer.start_span(
                    "ampfleet.first_step",
                    context=trace.set_span_in_context(self._launch),
                    start_time=self._spawned_ns,
                )

    def observe(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Rank 0's records as the agent reads them (checked already: records.py)."""
        with self._lock:
            for record in records:
                if self._first_step is None:
                    return
                kind = record.get("kind")
                if kind == "started":
                    self._resumed_from = int(record["resumed_from_step"])
                    self._first_step.add_event("ranks started", timestamp=self._at(record))
                elif kind in STEP_KINDS and int(record["step"]) > self._resumed_from:
                    self._first_step.set_attribute("ampfleet.step", int(record["step"]))
                    self._first_step.end(self._at(record))
                    self._first_step = None

    def ended(self) -> None:
        """The attempt is over here; a first step it never reported is said so."""
        with self._lock:
            if self._first_step is not None:
                self._first_step.set_attribute("ampfleet.step_reported", False)
            self._end_all()

    def _at(self, record: Mapping[str, Any]) -> int:
        now = time.time_ns()
        said = record.get("time")
        if not isinstance(said, float | int):
            return now
        return min(max(int(said * 1e9), self._spawned_ns), now)

    def _end_all(self) -> None:
        if self._launch.is_recording():
            self._launch.end()
        if self._first_step is not None:
            self._first_step.end()
            self._first_step = None
