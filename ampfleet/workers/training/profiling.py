"""Profiles on demand, inside the ranks.

The node agent keeps the job's open profile request in the run folder (profile_request.py).
Rank 0 reads it at each stop check (every few steps: `loop.STOP_CHECK_EVERY`), and its word
travels in that check's one collective, so every rank learns it after the same step; the
request itself then reaches every rank in one more exchange, only when there is one. From
the next step each traced rank runs `torch.profiler` (CPU activities, and CUDA on a GPU)
over the requested steps, the loop's steps and phases annotated in the trace, while every
rank times every phase of every captured step. After the last one each traced rank writes
its trace (Chrome trace format) and measures its part of the summary; one exchange gives
everyone's to all: rank 0 writes summary.json and reports the profile, and the first rank on
each node records its node's files as artifacts, for that node's agent to upload (nodes need
not share a disk).

A request that is withdrawn (the file gone, or naming another: cancelled) is dropped at a
stop check, or as the capture ends, and nothing is stored. A profiler that fails makes a
failed profile, never a failed run.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function

from ampfleet.core.artifact_names import PROFILE_KIND, profile_summary_name, profile_trace_name
from ampfleet.workers.profile_request import ProfileRequest, read_request
from ampfleet.workers.rundir import RecordWriter, RunDir
from ampfleet.workers.training.profile_summary import (
    OWN_ANNOTATION,
    combine,
    overlap,
    phase_times,
    top_operators,
)
from ampfleet.workers.training.reporting import Record, StepOutcome

START, CANCEL = 1.0, 2.0
"""Rank 0's word at a stop check (0.0: nothing to do); MAX-reduced, so everyone hears it."""
MAX_TRACE_READ_BYTES = 512 << 20
"""A larger trace is stored but not read back for the overlap (its JSON would take GBs)."""


def exchange(text: str, device: torch.device) -> list[str]:
    """Every rank's text, on every rank: one all_gather of the lengths, one of the bytes."""
    raw = text.encode()
    world_size = dist.get_world_size()
    size = torch.tensor([len(raw)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    lengths = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    padded[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(device)
    gathered = [torch.zeros_like(padded) for _ in range(world_size)]
    dist.all_gather(gathered, padded)
    return [bytes(g[:n].cpu().tolist()).decode() for g, n in zip(gathered, lengths, strict=True)]


class StepProfiler:
    def __init__(
        self,
        run_dir: RunDir | None,
        *,
        rank: int,
        device: torch.device,
        record: Record,
        setup: Callable[[], dict[str, str]],
    ) -> None:
        """`run_dir` None: no request ever arrives (a run outside an attempt's folder)."""
        self.run_dir = run_dir
        self.rank = rank
        self.device = device
        self.record = record
        self.setup = setup
        self._handled: set[str] = set()
        """Rank 0: the profiles already taken (the file stays until the agent sees them)."""
        self._pending: ProfileRequest | None = None
        self._active: ProfileRequest | None = None
        self._torch: profile | None = None
        self._start_step = 0
        self._steps: list[dict[str, Any]] = []
        self._error: str | None = None

    @property
    def capturing(self) -> bool:
        """Within a profile's steps (on every rank, traced or not): time every phase."""
        return self._active is not None

    @property
    def tracing(self) -> bool:
        """This rank runs torch.profiler now."""
        return self._torch is not None

    # -- the stop check -------------------------------------------------------------------

    def signal(self) -> float:
        """Rank 0's word for the stop check: START a new request, CANCEL the one in hand."""
        if self.run_dir is None or self.rank != 0:
            return 0.0
        request = read_request(self.run_dir)
        if self._active is not None:
            return 0.0 if request is not None and request.id == self._active.id else CANCEL
        if request is not None and request.id not in self._handled:
            self._pending = request
            return START
        return 0.0

    def agreed(self, word: float, step: int) -> None:
        """Every rank, with the stop check's agreed word, after `step`."""
        if word == START and self._active is None:
            mine = self._pending.to_json() if self._pending is not None else "null"
            request = ProfileRequest.from_json(exchange(mine, self.device)[0])
            self._pending = None
            if request is not None:
                self._start(request, step)
        elif word == CANCEL and self._active is not None:
            if self._torch is not None:
                with contextlib.suppress(Exception):
                    self._torch.stop()
            self._active, self._torch = None, None

    def _start(self, request: ProfileRequest, step: int) -> None:
        self._active, self._start_step, self._steps, self._error = request, step + 1, [], None
        if self.rank == 0:
            self._handled.add(request.id)
            self.record("profile", profile_id=request.id, state="capturing", start_step=step + 1)
        if not request.traces(self.rank):
            return
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        try:
            self._torch = profile(
                activities=activities,
                record_shapes=request.record_shapes,
                # Every thread: the gloo AllReduce runs on one of its own (ring.py).
                experimental_config=_ExperimentalConfig(profile_all_threads=True),
            )
            self._torch.start()
        except Exception as exc:
            self._torch = None
            self._error = f"the profiler could not start: {type(exc).__name__}: {exc}"

    # -- the captured steps ---------------------------------------------------------------

    @contextlib.contextmanager
    def stepping(self, step: int) -> Iterator[None]:
        """Around one optimizer step: a range named for it in the trace."""
        if self._torch is None:
            yield
            return
        with record_function(f"{OWN_ANNOTATION}step {step}"):
            yield

    def after_step(self, outcome: StepOutcome) -> None:
        """Every rank, after every step; the last captured one ends the profile."""
        if self._active is None:
            return
        self._steps.append(
            {
                "seconds": dict(outcome.timer.seconds),
                "step_time_s": time.perf_counter() - outcome.started,
            }
        )
        if len(self._steps) >= self._active.steps:
            self.finish()

    def finish(self) -> None:
        """Every rank, after the same step (the last captured, or the end of the run): ends
        the capture, writes and reports it."""
        request = self._active
        if request is None or self.run_dir is None:
            return
        local = self._local_result(request, self.run_dir)
        if self.rank == 0:
            withdrawn = read_request(self.run_dir)
            local["withdrawn"] = withdrawn is None or withdrawn.id != request.id
        entries = [json.loads(text) for text in exchange(json.dumps(local), self.device)]
        self._active, self._torch = None, None
        # Every rank took the same steps, so all see the same `failed`.
        failed = (
            entries[0].get("withdrawn") or not self._steps or any("error" in e for e in entries)
        )
        if failed and "trace" in local:
            Path(local["trace"]).unlink(missing_ok=True)
        if entries[0].get("withdrawn"):
            return  # cancelled: the API has said so already
        if not failed:
            self._list_node_files(request, entries, self.run_dir)
        if self.rank == 0:
            self._report(request, entries, self.run_dir)

    def _local_result(self, request: ProfileRequest, run_dir: RunDir) -> dict[str, Any]:
        """This rank's trace, written, and its figures; or why there are none."""
        entry: dict[str, Any] = {"rank": self.rank, "node": str(run_dir.path)}
        if not request.traces(self.rank):
            return entry
        if self._error is not None or self._torch is None:
            return {**entry, "error": self._error or "the profiler did not run"}
        try:
            self._torch.stop()
            trace = run_dir.path / profile_trace_name(request.id, self.rank)
            trace.parent.mkdir(parents=True, exist_ok=True)
            tmp = trace.with_name(f".{trace.name}.tmp")
            self._torch.export_chrome_trace(str(tmp))
            tmp.replace(trace)
            size = trace.stat().st_size
            events = _trace_events(trace) if size <= MAX_TRACE_READ_BYTES else None
            on_device = self.device.type == "cuda"
            return {
                **entry,
                "trace": str(trace),
                "trace_bytes": size,
                "phases": phase_times(self._steps),
                "top_operators": top_operators(self._torch.key_averages(), on_device),
                "overlap": None if events is None else overlap(events, len(self._steps)),
            }
        except Exception as exc:
            return {**entry, "error": f"{type(exc).__name__}: {exc}"[:500]}

    def _list_node_files(
        self, request: ProfileRequest, entries: list[dict[str, Any]], run_dir: RunDir
    ) -> None:
        """The first rank on each node records that node's traces, for its agent."""
        here = [e for e in entries if e["node"] == str(run_dir.path)]
        if min(e["rank"] for e in here) != self.rank:
            return
        records = [
            _artifact(profile_trace_name(request.id, e["rank"]), Path(e["trace"]), e["rank"])
            for e in here
            if "trace" in e
        ]
        if self.rank == 0:
            for fields in records:
                self.record("artifact", **fields)
            return
        try:
            writer = RecordWriter(run_dir.events_file, 0.0)  # no other rank writes this node's
            try:
                for fields in records:
                    writer.write("artifact", **fields)
            finally:
                writer.close()
        except OSError as exc:  # the profile stays uploading; training goes on
            print(f"profile {request.id}: could not record this node's traces: {exc}", flush=True)

    def _report(
        self, request: ProfileRequest, entries: list[dict[str, Any]], run_dir: RunDir
    ) -> None:
        """Rank 0: summary.json, and the profile's outcome in the records."""
        traced = [e for e in entries if "trace" in e]
        errors = [f"rank {e['rank']}: {e['error']}" for e in entries if "error" in e]
        if not self._steps:
            errors.append("no step was captured: the run ended first")
        if errors:
            reason = "; ".join(errors)[:2000]
            self.record("profile", profile_id=request.id, state="failed", reason=reason)
            return
        end_step = self._start_step + len(self._steps) - 1
        summary = {
            "profile_id": request.id,
            "steps": len(self._steps),
            "start_step": self._start_step,
            "end_step": end_step,
            "device": self.device.type,
            **self.setup(),
            "overall": combine(traced),
            "ranks": {
                str(e["rank"]): {
                    key: e[key] for key in ("phases", "overlap", "top_operators", "trace_bytes")
                }
                for e in traced
            },
        }
        name = profile_summary_name(request.id)
        path = run_dir.path / name
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, path)
        self.record("artifact", **_artifact(name, path, None))
        self.record(
            "profile",
            profile_id=request.id,
            state="uploading",
            start_step=self._start_step,
            end_step=end_step,
            ranks=[e["rank"] for e in traced],
            artifacts=[profile_trace_name(request.id, e["rank"]) for e in traced] + [name],
            summary=summary,
        )


def _artifact(name: str, path: Path, rank: int | None) -> dict[str, Any]:
    """An `artifact` record's fields (see uploads.PendingUpload)."""
    details = {"size": path.stat().st_size, **({} if rank is None else {"rank": rank})}
    return {
        "artifact_kind": PROFILE_KIND,
        "name": name,
        "paths": [str(path)],
        "step": None,
        "details": details,
    }


def _trace_events(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]
