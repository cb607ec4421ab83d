"""The node agent's side of single-node launches without torchrun (local_launcher.py): one
warm launcher kept ready per node, handed to the next attempt it may serve, and how an
attempt's launch reaches it.

This launcher serves recipes the operator installed (the built-in ones among them): their
ranks run the platform's code, unsandboxed, as the worker's user, which is what it is.
Bundled code starts from a warm launcher of its own, inside a sandbox made before the
attempt came (warm_sandbox.py); attempt_launch.py says which attempts keep torchrun.

A warm launcher serves one attempt and exits with it; the next is started only when no
attempt on the node is still starting, so its imports never slow a start down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

from ampfleet.workers.local_launcher import WARM_FLAG, Launch
from ampfleet.workers.process_title import ROOM_ARGUMENT

log = logging.getLogger(__name__)
LAUNCHER_MODULE = "ampfleet.workers.local_launcher"


def launcher_command(*, warm: bool) -> list[str]:
    """A local launcher: a warm one has room in its arguments for the titles it sets."""
    command = [sys.executable, "-m", LAUNCHER_MODULE]
    return [*command, WARM_FLAG, ROOM_ARGUMENT] if warm else command


def start_launcher(
    launch: Launch | None, *, stdout: IO[bytes] | int, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """A local launcher in a session of its own (the attempt's process group): cold, given
    its launch now, or warm (`launch` None), waiting for one."""
    process = subprocess.Popen(
        launcher_command(warm=launch is None),
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    if launch is not None:
        hand_over(process, launch)
    return process


def hand_over(process: subprocess.Popen[bytes], launch: Launch) -> None:
    """The launch, to a launcher that waits for it on stdin."""
    if process.stdin is None:
        raise RuntimeError("the launcher was started without a pipe for its launch")
    with process.stdin:
        process.stdin.write(launch.to_line())


class WarmPool:
    """At most one warm launcher on this node, waiting. Started and taken on the
    supervisor's thread: the launcher's parent-death signal is tied to the thread that
    started it."""

    def __init__(self, log_file: Path) -> None:
        self._log_file = log_file
        self._idle: subprocess.Popen[bytes] | None = None

    def fill(self, env: dict[str, str]) -> None:
        if self._idle is not None and self._idle.poll() is None:
            return
        if self._idle is not None:
            log.warning(
                "the warm launcher exited (%s) before an attempt took it", self._idle.returncode
            )
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self._idle = start_launcher(None, stdout=fd, env=env)
        finally:
            os.close(fd)

    def take(self) -> subprocess.Popen[bytes] | None:
        """The waiting launcher, if one is alive (still importing is fine: it reads the
        launch once done)."""
        idle, self._idle = self._idle, None
        if idle is not None and idle.poll() is None:
            return idle
        return None

    def close(self) -> None:
        """No attempt will come: the launcher reads end-of-file and exits."""
        idle, self._idle = self._idle, None
        if idle is not None and idle.stdin is not None:
            with contextlib.suppress(OSError):
                idle.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                idle.wait(timeout=10)
