"""Everything that contains one attempt's bundled code on this node, set up before launch
and taken down after: its host uid, its cgroups and rlimits, its seccomp program, its
network, and the bubblewrap command line that joins them (core/sandbox.py).

Each attempt running here gets a uid of its own from the operator's range, so host files
follow their permissions and no two attempts share an owner; its run and checkpoint folders
are given to that uid. A single-node attempt gets a network namespace with loopback only,
so its ranks and their rendezvous reach nothing of the host's, and no other job's store. A
multi-node attempt keeps the host's network, to meet its peers, under the egress filter of
its uid (egress.py): TCP to its nodes' addresses on ephemeral ports, nothing else. Where the
filter cannot be set, it is not launched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from sqlalchemy.orm import Session

from ampfleet.core.lifecycle import record_event
from ampfleet.core.memory import MB
from ampfleet.core.models import Job
from ampfleet.core.sandbox import Confinement, give_to, sandboxed
from ampfleet.core.settings import Settings
from ampfleet.core.unprivileged import sandbox_home
from ampfleet.workers import egress
from ampfleet.workers.limits import RankLimits, TaskGroup
from ampfleet.workers.netif import SOCKET_INTERFACE_VARIABLES

log = logging.getLogger(__name__)
LAUNCHER_MEMORY_MB = 1024
"""Beyond the ranks' slot shares: torchrun, the launcher, the interpreters' own start."""


def attempt_memory_mb(slot_memory_mb: int | None, procs: int) -> int | None:
    """An attempt's memory limit on a node: its slots' share, and the launcher's own."""
    return None if slot_memory_mb is None else slot_memory_mb * procs + LAUNCHER_MEMORY_MB


class UidPool:
    """The uids of the operator's range that attempts on this node hold now."""

    def __init__(self, first: int, count: int) -> None:
        self._free = list(range(first + 1, first + count))  # the first is pip's (requirements)
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            if not self._free:
                raise RuntimeError("every sandbox uid of this node is in use")
            return self._free.pop(0)

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._free.append(uid)


@lru_cache(maxsize=1)
def _seccomp_program() -> bytes:
    from ampfleet.workers.seccomp_policy import compiled_filter

    fd = compiled_filter()
    with os.fdopen(fd, "rb") as program:
        return program.read()


@dataclass
class Contained:
    """One attempt's containment; `close` after its processes have exited."""

    tasks: TaskGroup
    uid: int | None
    own_network: bool
    seccomp_fd: int | None
    _pool: UidPool | None = field(default=None, repr=False)
    filtered: bool = False
    """Its uid's egress is filtered (a multi-node attempt): the rules go on `close`."""

    @classmethod
    def prepare(
        cls,
        settings: Settings,
        pool: UidPool,
        *,
        name: str,
        nnodes: int,
        memory_mb: int | None,
        writable: list[Path],
        peers: tuple[str, ...] = (),
    ) -> Contained:
        """`memory_mb`: what all its processes on this node may use together (None: no
        memory cgroup; see `attempt_memory_mb`). `peers`: a multi-node attempt's nodes'
        addresses, this node's included: all its ranks may connect to."""
        own_network = nnodes == 1
        if not own_network:
            _can_filter(peers)
        uid = pool.take() if os.geteuid() == 0 else None
        filtered = False
        try:
            if not own_network and uid is not None:
                egress.hold(uid, egress.to_peers(peers))
                filtered = True
            _give_folders(writable, uid)
            limits = RankLimits(
                settings.sandbox_max_tasks,
                settings.sandbox_max_open_files,
                max_memory_bytes=None if memory_mb is None else memory_mb * MB,
                max_file_bytes=settings.sandbox_max_disk_mb * MB,
            )
            seccomp_fd = os.memfd_create("ampfleet-seccomp", 0)
            os.write(seccomp_fd, _seccomp_program())
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
        except BaseException:
            if uid is not None:
                _unfilter_and_give_back(pool, uid, filtered)
            raise
        return cls(TaskGroup(name, limits), uid, own_network, seccomp_fd, pool, filtered)

    def command(
        self,
        command: list[str],
        settings: Settings,
        *,
        writable: list[Path],
        readable: list[Path],
        devices: list[Path] | None,
    ) -> list[str]:
        confinement = Confinement(
            uid=self.uid,
            own_network=self.own_network,
            tmp_bytes=settings.sandbox_tmp_mb * MB,
            seccomp_fd=self.seccomp_fd,
        )
        return sandboxed(
            command,
            data_dir=settings.data_dir.resolve(),
            writable=writable,
            readable=readable,
            devices=devices,
            confinement=confinement,
        )

    def give_folders(self, writable: list[Path]) -> None:
        """Folders it writes, made now (a warm sandbox's, once its attempt is known)."""
        _give_folders(writable, self.uid)

    def environment(self, worker: Mapping[str, str]) -> dict[str, str]:
        """What it changes in the environment `worker` gives its processes: in a network
        namespace of its own the collectives talk on loopback, the one interface there is;
        an unprivileged uid's home is its private /tmp (core/unprivileged.py)."""
        changed = dict.fromkeys(SOCKET_INTERFACE_VARIABLES, "lo") if self.own_network else {}
        if self.uid is not None:
            changed["HOME"] = sandbox_home(worker)
        return changed

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return () if self.seccomp_fd is None else (self.seccomp_fd,)

    def enter(self) -> None:
        """In the launched bwrap, before it execs: bwrap would die of the preemption signal
        (the launcher and ranks set their own), and the limits of its processes."""
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self.tasks.enter()

    def launched(self) -> None:
        """bwrap has the seccomp program: this process's copy is not needed any more."""
        if self.seccomp_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.seccomp_fd)
            self.seccomp_fd = None

    def close(self) -> None:
        """After its processes have exited; its egress rules go even if the rest fails."""
        self.launched()
        try:
            self.tasks.remove()
        finally:
            if self.uid is not None and self._pool is not None:
                _unfilter_and_give_back(self._pool, self.uid, self.filtered)
                self.uid = None
                self.filtered = False


def _give_folders(folders: list[Path], uid: int | None) -> None:
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        if uid is not None:
            give_to(folder, uid)


def _can_filter(peers: tuple[str, ...]) -> None:
    """A multi-node attempt runs only under the egress filter: why it cannot, if so."""
    if not peers:
        raise ValueError("a multi-node attempt needs its nodes' addresses (peers)")
    if (problem := egress.problem()) is not None:
        raise RuntimeError(
            "a multi-node attempt of bundled code keeps the host's network and runs only "
            f"under the egress filter of its uid, which this node cannot set: {problem}"
        )


def _unfilter_and_give_back(pool: UidPool, uid: int, filtered: bool) -> None:
    """A uid whose rules could not be removed stays out of the pool: still filtered, and
    taken by no other attempt (a worker's restart clears it)."""
    if filtered:
        try:
            egress.release(uid)
        except Exception:
            log.exception("the egress rules of uid %s could not be removed; it stays unused", uid)
            return
    pool.give_back(uid)


def report_limits(session: Session, contained: Contained, job_id: str, node: str) -> None:
    """Events for the limits the attempt met on this node: task starts refused, processes
    the kernel killed at the memory limit."""
    job = session.get(Job, job_id)
    if job is None:
        return
    limits = contained.tasks.limits
    if refused := contained.tasks.refused_forks():
        record_event(
            session,
            job,
            "task_limit",
            f"{refused} process or thread starts on node {node} were refused at the "
            f"sandbox's limit of {limits.max_tasks} tasks (AMPFLEET_SANDBOX_MAX_TASKS)",
        )
    if (killed := contained.tasks.oom_kills()) and limits.max_memory_bytes is not None:
        record_event(
            session,
            job,
            "out_of_memory",
            f"the kernel killed {killed} of the attempt's processes on node {node} at its "
            f"memory limit of {limits.max_memory_bytes // MB:,} MB (its slots' share of the "
            "node, all its processes together: ranks, shared memory, /tmp)",
        )
