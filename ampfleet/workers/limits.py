"""Limits on the processes of an attempt that runs bundled code: tasks, memory, open files and
file size.

Tasks (processes and threads) and memory are a cgroup per attempt, made by the node agent
(as root) and joined by the launched process before it execs, so everything the attempt
starts is in it: cgroup v2 where the node delegates the controllers, else v1's `pids` and
`memory` hierarchies. The memory cgroup counts what a per-process rlimit cannot: shared
mappings, pages of the RAM-backed /tmp and /dev/shm, every rank together; swap is not a way
around it. Past it the kernel's OOM killer ends the attempt's processes, and `oom_kills`
says so. An rlimit on processes would not hold for an agent that runs as root (the kernel
exempts root from RLIMIT_NPROC); where no cgroup can be made, it is set anyway, which holds
where the agent is not root, and memory falls back to the launcher's per-rank RLIMIT_DATA.

Open files and the size of any one file are rlimits set in the launched process, inherited
by bwrap, torchrun and the ranks; raising them back needs a capability the sandbox drops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
from dataclasses import dataclass, replace
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "ampfleet-"


@dataclass(frozen=True)
class RankLimits:
    max_tasks: int
    max_open_files: int
    max_memory_bytes: int | None = None
    """All the attempt's processes on this node together; None: no memory cgroup."""
    max_file_bytes: int | None = None
    """Any one file a process writes (RLIMIT_FSIZE): no single file outgrows the disk limit."""


def _parent_for(controller: str) -> Path | None:
    """A folder where a cgroup with `controller` may be made: v1's hierarchy of it, else a
    v2 mount whose subtree gets it."""
    v1 = CGROUP_ROOT / controller
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    for v2 in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        with contextlib.suppress(OSError):
            subtree = (v2 / "cgroup.subtree_control").read_text().split()
            if controller in subtree and os.access(v2, os.W_OK):
                return v2
    return None


def _v2(group: Path) -> bool:
    return (group / "cgroup.controllers").exists()


class TaskGroup:
    """The cgroups of one attempt on this node (one per hierarchy), or none where none can
    be made."""

    def __init__(self, name: str, limits: RankLimits) -> None:
        self.limits = limits
        self.pids: Path | None = self._make("pids", name, self._pids_limits())
        self.memory: Path | None = None
        if limits.max_memory_bytes is not None:
            self.memory = self._make("memory", name, self._memory_limits())

    def _pids_limits(self) -> dict[str, str]:
        return {"pids.max": str(self.limits.max_tasks)}

    def _memory_limits(self) -> dict[str, str]:
        limit = str(self.limits.max_memory_bytes)
        # v2 reads memory.max and swap apart; v1 limits memory, then memory + swap alike.
        return {
            "memory.max": limit,
            "memory.swap.max": "0",
            "memory.limit_in_bytes": limit,
            "memory.memsw.limit_in_bytes": limit,
        }

    @staticmethod
    def _make(controller: str, name: str, values: dict[str, str]) -> Path | None:
        parent = _parent_for(controller)
        if parent is None:
            log.warning("no %s cgroup to make for %s: rlimits only", controller, name)
            return None
        path = parent / f"{GROUP_PREFIX}{name}"
        try:
            path.mkdir(exist_ok=True)
            written = 0
            for file, value in values.items():
                if (path / file).exists():
                    (path / file).write_text(value)
                    written += 1
            if not written:
                raise OSError(f"none of {', '.join(values)} in {path}")
        except OSError as exc:
            log.warning("%s cgroup %s not made (%s): rlimits only", controller, path, exc)
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return path

    def limit_memory(self, max_memory_bytes: int) -> None:
        """A new memory limit for everything in the group (a warm sandbox's, once its
        attempt is known: warm_sandbox.py). v1 refuses memory + swap below memory alone, so
        a higher limit is written in the opposite order of a lower one."""
        raising = self.limits.max_memory_bytes is None or (
            max_memory_bytes > self.limits.max_memory_bytes
        )
        self.limits = replace(self.limits, max_memory_bytes=max_memory_bytes)
        if self.memory is None:
            return
        values = list(self._memory_limits().items())
        for file, value in reversed(values) if raising else values:
            if (self.memory / file).exists():
                (self.memory / file).write_text(value)

    @property
    def groups(self) -> list[Path]:
        return list(dict.fromkeys(p for p in (self.pids, self.memory) if p is not None))

    def enter(self) -> None:
        """In the launched process, before it execs: join the groups, set the rlimits."""
        for group in self.groups:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        files = self.limits.max_open_files
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        if self.limits.max_file_bytes is not None:
            size = self.limits.max_file_bytes
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        if self.pids is None:
            tasks = self.limits.max_tasks
            resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))

    def refused_forks(self) -> int:
        """How many times a fork or thread was refused at the limit."""
        return _count(self.pids, "pids.events", "max") if self.pids else 0

    def oom_kills(self) -> int:
        """How many of the attempt's processes the kernel killed at the memory limit."""
        if self.memory is None:
            return 0
        events = "memory.events" if _v2(self.memory) else "memory.oom_control"
        return _count(self.memory, events, "oom_kill")

    def remove(self) -> None:
        """Once its processes are gone (an attempt's exit); a leftover is harmless."""
        for group in self.groups:
            with contextlib.suppress(OSError):
                group.rmdir()


def _count(group: Path, file: str, name: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in (group / file).read_text().splitlines():
            key, _, count = line.partition(" ")
            if key == name:
                return int(count)
    return 0
