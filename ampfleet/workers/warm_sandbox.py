"""A sandbox started before its attempt is known, with a warm launcher in it: bundled code
starts with torch and the training stack already imported, in a sandbox no weaker than the
one a cold start gets.

The node agent keeps one ready (AMPFLEET_WARM_SANDBOX: by default once the node has run
bundled code since it started, so that a node that never does holds no second warm
interpreter). It is a complete sandbox of its own from
the start: bubblewrap with its own mount, PID, IPC, UTS and network namespaces (loopback
only), a uid of its own from the node's range, a cgroup, the rlimits and the seccomp filter,
all as containment.py makes them for a cold start; its launcher (local_launcher.py, `--warm`)
imports the platform's code as that uid and waits on stdin. It holds nothing of any tenant:
no folder of a job is in it, and no job's code has run in it.

When a single-node attempt of bundled code comes, the agent gives that sandbox the attempt's
folders (sandbox_mounts.py: its run and checkpoint folders writable, its code and inputs
read-only, at the paths a cold sandbox binds them at), gives it the attempt's memory limit,
and hands the launch over on stdin; the launcher forks the ranks. It serves exactly that
attempt and exits with it, so nothing of one tenant can reach another's: each attempt gets a
sandbox, a uid, a /tmp and namespaces that no other attempt ever had.

What a sandbox fixes as it starts and differs between attempts keeps the cold path (each
start says why in its `start_phases` event): an attempt on several nodes (its network is the
host's, under its uid's egress rules, and torchrun meets its nodes), a script (run under
torchrun, as it expects), a job with its own code.requirements (its own interpreter), an
attempt that gets GPUs (their device nodes are bound as the sandbox starts), and a worker
that is not root or a kernel older than 5.12 (no binding into a running sandbox).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from ampfleet.core.memory import MB
from ampfleet.core.settings import Settings
from ampfleet.workers.containment import Contained, UidPool
from ampfleet.workers.gpus import device_nodes
from ampfleet.workers.launch import children
from ampfleet.workers.local_launcher import Launch
from ampfleet.workers.sandbox_mounts import Bind, MountError, bind_into
from ampfleet.workers.warm_pool import hand_over, launcher_command

log = logging.getLogger(__name__)
RETRY_AFTER_S = 60.0
"""How long the agent waits to start another warm sandbox after one could not be made."""


class WarmSandbox:
    """One sandbox and the warm launcher in it, waiting for its attempt."""

    def __init__(self, contained: Contained, process: subprocess.Popen[bytes]) -> None:
        self.contained = contained
        self.process = process

    @classmethod
    def start(
        cls,
        settings: Settings,
        uids: UidPool,
        *,
        name: str,
        memory_mb: int | None,
        env: dict[str, str],
        log_fd: int,
    ) -> WarmSandbox:
        """On the supervisor's thread: bubblewrap dies with the thread that started it."""
        contained = Contained.prepare(
            settings, uids, name=name, nnodes=1, memory_mb=memory_mb, writable=[]
        )
        command = contained.command(
            launcher_command(warm=True),
            settings,
            writable=[],
            readable=[],
            devices=device_nodes(None),  # as a cold sandbox on a node without GPU slots
        )
        try:
            process = subprocess.Popen(
                command,
                preexec_fn=contained.enter,  # noqa: PLW1509 - its cgroups and rlimits
                pass_fds=contained.pass_fds,
                stdin=subprocess.PIPE,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its attempt's process group, as a cold launch's
                env={**env, **contained.environment(env)},
            )
        except BaseException:
            contained.close()
            raise
        contained.launched()
        return cls(contained, process)

    def alive(self) -> bool:
        return self.process.poll() is None

    def launcher_pid(self) -> int | None:
        """The launcher's pid, once the sandbox is set up: the one process in it that runs
        as its uid (bubblewrap starts it only after every mount and namespace is made)."""
        try:
            inside = _descendants(self.process.pid)
            found = [pid for pid in inside if _real_uid(pid) == self.contained.uid]
        except (OSError, ValueError):  # a process gone while it was looked at
            return None
        return found[0] if len(found) == 1 else None

    def admit(
        self, launch: Launch, *, readable: list[Path], writable: list[Path], memory_mb: int | None
    ) -> None:
        """The attempt's folders into the sandbox (`readable` first, as bubblewrap binds
        them) and its memory limit (all its processes together), then its launch to the
        launcher."""
        self.contained.give_folders(writable)
        binds = [Bind(str(p), str(p), "ro") for p in readable]
        binds += [Bind(str(p), str(p), "rw") for p in writable]
        pid = self.launcher_pid()
        if pid is None:
            raise MountError("its launcher is not running")
        pidfd = os.pidfd_open(pid)
        try:
            if self.launcher_pid() != pid:  # gone before the pidfd was had: not ours
                raise MountError("its launcher exited")
            bind_into(pidfd, binds)
        finally:
            os.close(pidfd)
        if memory_mb is not None:
            self.contained.tasks.limit_memory(memory_mb * MB)
        hand_over(self.process, launch)

    def discard(self) -> None:
        """Never to serve an attempt: it holds nothing, so it is killed, not asked (its
        launcher may still be importing); then its uid and cgroups go back."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self.contained.close()


class WarmSandboxes:
    """At most one warm sandbox on this node, waiting. Started and taken on the supervisor's
    thread."""

    def __init__(self, settings: Settings, uids: UidPool, memory_mb: int | None) -> None:
        """`memory_mb`: its limit until an attempt's replaces it (one slot's share)."""
        self.settings = settings
        self.uids = uids
        self.memory_mb = memory_mb
        self._log_file = settings.data_dir.resolve() / "warm-sandbox.log"
        self._idle: WarmSandbox | None = None
        self._started = 0
        self._retry_at = 0.0

    def fill(self, env: dict[str, str]) -> None:
        if self._idle is not None and self._idle.alive():
            return
        if (dead := self._idle) is not None:
            log.warning("the warm sandbox exited (%s) unused", dead.process.returncode)
            self._idle = None
            dead.discard()
        if time.monotonic() < self._retry_at:
            return
        self._started += 1
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self._idle = WarmSandbox.start(
                self.settings,
                self.uids,
                name=f"warm-{os.getpid()}-{self._started}",
                memory_mb=self.memory_mb,
                env=env,
                log_fd=fd,
            )
        except Exception:
            log.exception("no warm sandbox could be started; retrying in %.0f s", RETRY_AFTER_S)
            self._retry_at = time.monotonic() + RETRY_AFTER_S
        finally:
            os.close(fd)

    def take(self) -> WarmSandbox | None:
        """The waiting sandbox, if it is set up and alive (its launcher still importing is
        fine: it reads the launch once done)."""
        idle = self._idle
        if idle is None or not idle.alive() or idle.launcher_pid() is None:
            return None
        self._idle = None
        return idle

    def close(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.discard()


def _descendants(pid: int) -> list[int]:
    """The processes under `pid`, from /proc (its own subtree, not every process's), at
    most a few dozen: before its attempt a sandbox holds bubblewrap's init and the launcher."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 64:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def _real_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise ValueError(f"no Uid in /proc/{pid}/status")
