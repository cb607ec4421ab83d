"""A process that dies with its parent: the launcher with the worker, each rank with torchrun,
a script with the rank process that runs it (training/script.py).

PR_SET_PDEATHSIG makes the kernel send SIGKILL when the parent dies, so killing the worker,
even with SIGKILL, takes every process of its attempts with it. Standard library only: a
script's rank process imports no torch.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1

PARENT_PID_VARIABLE = "TRAINING_PARENT_PID"
"""The pid a process's parent had when it was started, set by the one that starts it: a
parent that died before the child reached prctl (the imports take seconds) is caught, where
comparing with the parent the child first saw would compare with the one it was handed to."""


def die_with_parent() -> None:
    """If the parent is killed (say, torchrun with the whole worker), take this process too."""
    expected = os.environ.get(PARENT_PID_VARIABLE, "")
    parent = int(expected) if expected.isdigit() else os.getppid()
    if not _set_parent_death_signal():
        return
    # The parent died before prctl took effect. (Not "the parent is pid 1": in the sandbox's
    # PID namespace the launcher's living parent is.)
    if os.getppid() != parent:
        os._exit(1)


def _set_parent_death_signal() -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return False
    return True


def child_dies_with_parent(parent: int) -> None:
    """A `preexec_fn`, run in the forked child before it executes the program: the child of
    `parent` (the caller's pid, taken before the fork) dies with it."""
    if _set_parent_death_signal() and os.getppid() != parent:
        os._exit(1)
