"""Limits on the processes of an attempt that runs bundled code: how many tasks (processes
and threads) and how many open files.

Open files are an rlimit set in the launched process before it execs (inherited by bwrap,
torchrun and the ranks; raising it back needs a capability the sandbox drops). The task
count is a pids cgroup per attempt where the node agent may create one (cgroup v1's `pids`
hierarchy, or a cgroup v2 mount that delegates `pids`): an rlimit on processes does not hold
for an agent that runs as root, which is how most nodes run it, since the kernel exempts
the root user from RLIMIT_NPROC whatever the user namespace maps it to. Where no cgroup can
be made, RLIMIT_NPROC is set too, which holds where the agent is not root.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "ampfleet-"


@dataclass(frozen=True)
class RankLimits:
    max_tasks: int
    max_open_files: int


def _pids_parent() -> Path | None:
    """A folder where a pids cgroup may be made: v1's pids hierarchy, else a v2 mount
    whose subtree gets the pids controller."""
    v1 = CGROUP_ROOT / "pids"
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    for v2 in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        subtree = v2 / "cgroup.subtree_control"
        with contextlib.suppress(OSError):
            if "pids" in subtree.read_text().split() and os.access(v2, os.W_OK):
                return v2
    return None


class TaskGroup:
    """The pids cgroup of one attempt on this node, or nothing where none can be made."""

    def __init__(self, name: str, limits: RankLimits) -> None:
        self.limits = limits
        self.path: Path | None = None
        parent = _pids_parent()
        if parent is None:
            log.warning("no pids cgroup to make: %s's tasks are limited by rlimit only", name)
            return
        path = parent / f"{GROUP_PREFIX}{name}"
        try:
            path.mkdir(exist_ok=True)
            (path / "pids.max").write_text(str(limits.max_tasks))
        except OSError as exc:
            log.warning("pids cgroup %s not made (%s): rlimit only", path, exc)
            with contextlib.suppress(OSError):
                path.rmdir()
            return
        self.path = path

    def enter(self) -> None:
        """In the launched process, before it execs: join the group, set the rlimits."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))
        files = self.limits.max_open_files
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        if self.path is None:
            tasks = self.limits.max_tasks
            resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))

    def refused_forks(self) -> int:
        """How many times a fork or thread was refused at the limit."""
        if self.path is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / "pids.events").read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "max":
                    return int(count)
        return 0

    def remove(self) -> None:
        """Once its processes are gone (an attempt's exit); a leftover is harmless."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()
