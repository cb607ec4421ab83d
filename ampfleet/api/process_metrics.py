"""The standard `process_*` and `python_*` series of this API process, as prometheus_client's
default collectors (ProcessCollector, PlatformCollector, GCCollector) name and compute them,
so the stock dashboards and alerts for a Python exporter work on /metrics as they are.

Written by hand like the rest of the exposition (api/observability.py): the package is not a
dependency, and these are a few reads of /proc and of the interpreter. Where /proc is missing
(not Linux) the `process_*` families are left out, as the stock collector leaves them.
"""

from __future__ import annotations

import gc
import os
import platform
import resource
import sys
from pathlib import Path

PROC = Path("/proc")


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _boot_time(proc: Path) -> float:
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise ValueError("no btime in /proc/stat")


def _max_fds(proc: Path) -> float:
    for line in (proc / "self" / "limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft = line.split()[3]
            return float("inf") if soft == "unlimited" else float(soft)
    return float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def process_lines(proc: Path = PROC) -> list[str]:
    try:
        stat = (proc / "self" / "stat").read_text()
        boot = _boot_time(proc)
        open_fds = len(os.listdir(proc / "self" / "fd"))
        max_fds = _max_fds(proc)
    except (OSError, ValueError):
        return []
    # The command name (field 2) may hold spaces and parentheses: fields count from its end.
    fields = stat.rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    page = resource.getpagesize()
    utime, stime, start = float(fields[11]), float(fields[12]), float(fields[19])
    vsize, rss = float(fields[20]), float(fields[21])
    out = _family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
    out.append(f"process_virtual_memory_bytes {vsize:.15g}")
    out += _family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
    out.append(f"process_resident_memory_bytes {rss * page:.15g}")
    out += _family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    )
    out.append(f"process_start_time_seconds {start / ticks + boot:.15g}")
    out += _family(
        "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds."
    )
    out.append(f"process_cpu_seconds_total {(utime + stime) / ticks:.15g}")
    out += _family("process_open_fds", "gauge", "Number of open file descriptors.")
    out.append(f"process_open_fds {open_fds}")
    out += _family("process_max_fds", "gauge", "Maximum number of open file descriptors.")
    out.append(f"process_max_fds {'+Inf' if max_fds == float('inf') else f'{max_fds:.15g}'}")
    return out


def python_lines() -> list[str]:
    info = sys.version_info
    labels = (
        f'implementation="{platform.python_implementation()}",major="{info.major}",'
        f'minor="{info.minor}",patchlevel="{info.micro}",version="{platform.python_version()}"'
    )
    out = _family("python_info", "gauge", "Python platform information")
    out.append(f"python_info{{{labels}}} 1")
    stats = gc.get_stats()
    for key, name, what in (
        ("collected", "python_gc_objects_collected_total", "Objects collected during gc"),
        (
            "uncollectable",
            "python_gc_objects_uncollectable_total",
            "Uncollectable objects found during GC",
        ),
        (
            "collections",
            "python_gc_collections_total",
            "Number of times this generation was collected",
        ),
    ):
        out += _family(name, "counter", what)
        out += [
            f'{name}{{generation="{generation}"}} {float(values[key]):.15g}'
            for generation, values in enumerate(stats)
        ]
    return out
