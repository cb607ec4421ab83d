"""What each rank costs its node, sampled by the node agent from outside the ranks.

An accelerator idles when its rank waits: on the data loader, on a CPU starved by its
neighbours, on the host's memory. A rank can time its own phases (training/timing.py), but
it cannot see that it is starved, and a rank stuck in a collective reports nothing at all.
So the agent reads every rank's process tree through psutil (CPU utilisation, resident
memory) and, where NVML is present, the devices they hold (utilisation, device memory),
and stores them as the job's metrics at the step the job has reached. Reading /proc and
NVML costs the ranks nothing.

A rank is a direct child of the launcher (torchrun runs in the launcher's process) with
RANK in its environment; its tree includes a sandbox's processes, so a bundle's rank is
counted whole.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil

from ampfleet.workers.process_title import rank_of_title
from ampfleet.workers.series import Point

log = logging.getLogger(__name__)
MB = 1024 * 1024
PER_RANK = ("cpu_percent", "rss_mb", "gpu_memory_mb", "gpu_util_percent")
"""What a sample holds for each rank, as `<kind>_rank<R>` metrics."""


def by_kind(sample: dict[str, float]) -> dict[str, list[float]]:
    """A sample's values per kind, one per rank."""
    kinds: dict[str, list[float]] = {kind: [] for kind in PER_RANK}
    for name, value in sample.items():
        kind, _, rank = name.rpartition("_rank")
        if kind in kinds and rank.isdigit():
            kinds[kind].append(value)
    return kinds


def node_totals(samples: Iterable[dict[str, float]]) -> dict[str, float]:
    """What the node's ranks use together, from each attempt's latest sample: CPU percent
    (of one core) and memory summed, GPU utilisation averaged over the ranks that hold one."""
    kinds: dict[str, list[float]] = {kind: [] for kind in PER_RANK}
    for sample in samples:
        for kind, values in by_kind(sample).items():
            kinds[kind] += values
    totals = {
        "ranks": float(len(kinds["rss_mb"])),
        "cpu_percent": round(sum(kinds["cpu_percent"]), 2),
        "rss_mb": round(sum(kinds["rss_mb"]), 2),
    }
    if kinds["gpu_util_percent"]:
        util = kinds["gpu_util_percent"]
        totals["gpu_util_percent"] = round(sum(util) / len(util), 2)
        totals["gpu_memory_mb"] = round(sum(kinds["gpu_memory_mb"]), 2)
    return totals


@dataclass
class _CpuMark:
    at: float
    cpu_s: float


class Nvml:
    """The devices of this node through NVML: which process holds how much memory, and
    how busy each device is. `open` answers None where no NVIDIA driver is loaded."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._devices = [
            nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())
        ]

    @classmethod
    def open(cls) -> Nvml | None:
        try:
            import pynvml  # type: ignore[import-untyped]  # only where NVIDIA drivers are

            pynvml.nvmlInit()
            return cls(pynvml)
        except Exception:  # no package, no driver, no device: CPU telemetry only
            return None

    def usage_by_pid(self) -> dict[int, tuple[float, float]]:
        """pid -> (device memory MB, utilisation percent of the busiest device it holds)."""
        usage: dict[int, tuple[float, float]] = {}
        for device in self._devices:
            try:
                busy = float(self._nvml.nvmlDeviceGetUtilizationRates(device).gpu)
                processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(device)
            except self._nvml.NVMLError:
                continue
            for process in processes:
                held = (process.usedGpuMemory or 0) / MB
                memory, util = usage.get(process.pid, (0.0, 0.0))
                usage[process.pid] = (memory + held, max(util, busy))
        return usage


class RankTelemetry:
    """Samples one attempt's ranks on this node, at most every `interval_s` seconds and at
    most once per step (a series holds one point per step and name)."""

    def __init__(self, launcher_pid: int, interval_s: float, nvml: Nvml | None = None) -> None:
        self._launcher = launcher_pid
        self._interval_s = interval_s
        self._nvml = nvml
        self._marks: dict[int, _CpuMark] = {}
        self._last_step = 0
        self._last_at = float("-inf")
        self.latest: dict[str, float] = {}
        """The last sample: the idle watch and the node's heartbeat read it, no sampler of
        their own (a second walk of the process tree would also cut the CPU windows short)."""
        self.sampled_at = float("-inf")
        """Monotonic seconds of `latest`."""

    def take(self, step: int) -> list[Point]:
        """Samples once the interval is up, whether or not the job moved on (an idle or
        stuck job is still watched); the points of it at `step`, when that step has none."""
        now = time.monotonic()
        if now - self._last_at < self._interval_s:
            return []
        values = self.sample()
        if not values:
            return []
        self._last_at = self.sampled_at = now
        if step <= self._last_step:
            return []
        self._last_step = step
        return [(step, name, value) for name, value in values.items()]

    def sample(self) -> dict[str, float]:
        """Metric name -> value for every rank of this node that is alive now."""
        gpu = self._nvml.usage_by_pid() if self._nvml is not None else {}
        values: dict[str, float] = {}
        for rank, tree in self._ranks():
            cpu_s, rss, started = 0.0, 0, None
            memory, util = 0.0, 0.0
            for process in tree:
                with contextlib.suppress(psutil.Error):  # exited between listing and reading
                    with process.oneshot():
                        times = process.cpu_times()
                        cpu_s += times.user + times.system
                        rss += process.memory_info().rss
                        started = started or process.create_time()
                    held, busy = gpu.get(process.pid, (0.0, 0.0))
                    memory, util = memory + held, max(util, busy)
            if started is None or rss == 0:  # gone, or a zombie not reaped yet: no reading
                continue
            values[f"cpu_percent_rank{rank}"] = self._cpu_percent(rank, cpu_s, started)
            values[f"rss_mb_rank{rank}"] = rss / MB
            if self._nvml is not None:
                values[f"gpu_memory_mb_rank{rank}"] = memory
                values[f"gpu_util_percent_rank{rank}"] = util
        self.latest = values
        return values

    def _cpu_percent(self, rank: int, cpu_s: float, started: float) -> float:
        """Percent of one core since the previous sample (since the rank started, first)."""
        now = time.time()
        mark = self._marks.get(rank) or _CpuMark(at=started, cpu_s=0.0)
        self._marks[rank] = _CpuMark(at=now, cpu_s=cpu_s)
        elapsed = now - mark.at
        return max(0.0, 100.0 * (cpu_s - mark.cpu_s) / elapsed) if elapsed > 0 else 0.0

    def rank_pids(self) -> list[int]:
        """The first process of each rank's tree (the rank itself, or its sandbox)."""
        return [tree[0].pid for _rank, tree in self._ranks()]

    def _ranks(self) -> Iterator[tuple[int, list[psutil.Process]]]:
        try:
            children = psutil.Process(self._launcher).children()
        except psutil.Error:
            return
        for child in children:
            try:
                rank = child.environ().get("RANK")
                # A rank forked from a warm launcher has its number in its title only.
                titled = rank_of_title(child.cmdline()) if rank is None else None
                tree = [child, *child.children(recursive=True)]
            except psutil.Error:
                continue
            if rank is not None and rank.isdigit():
                yield int(rank), tree
            elif titled is not None:
                yield titled, tree
