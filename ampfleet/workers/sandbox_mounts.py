"""Binding an attempt's folders into a sandbox that is already running: a warm sandbox
(warm_sandbox.py) made before its attempt was known gets them as bubblewrap would have
given them at its start: the same paths, read-only or writable, nosuid and nodev.

The node agent (root) runs `python -m ampfleet.workers.sandbox_mounts PIDFD BINDS`, PIDFD
a descriptor it hands over: a pidfd of a process in the sandbox. In the host's mount
namespace the helper clones each source as a detached bind mount (open_tree(2)) and sets
its flags (mount_setattr(2)); then it enters the sandbox's mount namespace (setns(2),
which a multi-threaded process such as the agent cannot do: hence a process of its own)
and attaches each at its target (move_mount(2)), making the target's folders first, 0755
and root's, where bubblewrap would have made them. Nothing changes in the host's
namespace, and the sandbox's processes (no capability) can neither unmount nor remount
what they were given.

Only before the attempt's launch reaches the sandbox: nothing but the platform's launcher
has run in it, so no path in it can have been planted; still, a target whose path resolves
anywhere else (a symbolic link on the way) is refused. Linux 5.12 or later, as root.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
"""The same numbers on every architecture Linux added them for at once (x86_64, arm64)."""
OPEN_TREE_CLONE = 1
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
CLONE_NEWNS = 0x00020000
HELPER_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Bind:
    source: str
    """A host path: a folder (or a file)."""
    target: str
    """Where it appears in the sandbox (the same path, for an attempt's folders)."""
    mode: Literal["ro", "rw"]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class MountError(RuntimeError):
    """The sandbox could not be given a folder."""


def bind_into(pidfd: int, binds: list[Bind]) -> None:
    """Gives the sandbox of the process `pidfd` refers to each of `binds`, in order (a
    later one may lie under an earlier one)."""
    encoded = json.dumps([asdict(b) for b in binds])
    helper = [sys.executable, "-m", "ampfleet.workers.sandbox_mounts", str(pidfd), encoded]
    result = subprocess.run(
        helper,
        pass_fds=(pidfd,),
        capture_output=True,
        timeout=HELPER_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        raise MountError(said[-1] if said else f"the mount helper exited {result.returncode}")


@lru_cache(maxsize=1)
def mount_api_problem() -> str | None:
    """Why this node cannot give a running sandbox its folders, or None where it can."""
    if os.geteuid() != 0:
        return "the worker is not root (binding into a running sandbox needs CAP_SYS_ADMIN)"
    libc = ctypes.CDLL(None, use_errno=True)
    # An invalid descriptor: EBADF where the call exists, ENOSYS where the kernel lacks it.
    attr = _MountAttr(0, 0, 0, 0)
    ctypes.set_errno(0)
    libc.syscall(SYS_MOUNT_SETATTR, -1, b"", AT_EMPTY_PATH, ctypes.byref(attr), 32)
    if ctypes.get_errno() == 38:  # ENOSYS
        return "the kernel has no mount_setattr(2) (Linux 5.12 or later)"
    return None


def _checked(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _clone(libc: ctypes.CDLL, bind: Bind) -> int:
    """A detached bind mount of the source, with the sandbox's flags for it."""
    source = bind.source.encode()
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC
    tree = _checked(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, source, flags), f"{bind.source}")
    attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if bind.mode == "ro" else 0)
    attr = _MountAttr(attrs, 0, 0, 0)
    size = ctypes.sizeof(attr)
    _checked(
        libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), size),
        f"{bind.source}: its flags",
    )
    return tree


def _make_target(bind: Bind, is_dir: bool) -> None:
    """The target in the sandbox's namespace; refused where its path is not itself (a
    symbolic link on the way), before anything is made."""
    target = Path(bind.target)
    if not target.is_absolute() or ".." in target.parts:
        raise MountError(f"{bind.target}: not an absolute path")
    if any(p.is_symlink() for p in (*target.parents, target)):
        raise MountError(f"{bind.target}: its path leads elsewhere in the sandbox")
    if is_dir:
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
    else:
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
    if os.path.realpath(target) != str(target):
        raise MountError(f"{bind.target}: its path leads elsewhere in the sandbox")


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd, binds = int(argv[0]), [Bind(**b) for b in json.loads(argv[1])]
    os.umask(0o022)
    trees = [(bind, _clone(libc, bind), os.path.isdir(bind.source)) for bind in binds]
    _checked(libc.setns(pidfd, CLONE_NEWNS), "entering the sandbox's mount namespace")
    for bind, tree, is_dir in trees:
        _make_target(bind, is_dir)
        target = bind.target.encode()
        _checked(
            libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH),
            f"{bind.target}",
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, MountError) as exc:
        print(f"binding into the sandbox: {exc}", file=sys.stderr)
        sys.exit(1)
