"""The bubblewrap sandbox of ranks that run bundled code, as one explicit argument list.

Inside: the system read-only, a private /tmp, /dev and /proc of its own (own PID namespace:
no view of the agent's or other jobs' processes), the whole data dir hidden under an empty
tmpfs (the SQLite file, other jobs' run folders and checkpoints, the broker files, the local
store), then only the job's run folder and checkpoint folder bound back writable and the
unpacked bundle read-only; an unprivileged uid in a user namespace, no capabilities, and it
dies with its parent. The network stays the host's: ranks rendezvous across nodes.

Standard library only: the API asks `bubblewrap_problem` before it accepts bundled code.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

BWRAP = "bwrap"
NOBODY = 65534


def bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot contain ranks on this machine, or None when it can."""
    return _problem_of(shutil.which(BWRAP))


@lru_cache
def _problem_of(path: str | None) -> str | None:
    if path is None:
        return "bubblewrap (bwrap) is not installed"
    trial = [path, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
    try:
        result = subprocess.run(trial, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run: {exc}"
    if result.returncode != 0:
        return f"bwrap cannot run: {result.stderr.decode(errors='replace').strip()[:300]}"
    return None


def _namespaces() -> list[str]:
    return [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-user",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
    ]


def sandboxed(
    command: list[str],
    *,
    data_dir: Path,
    writable: list[Path],
    readable: list[Path],
    devices: list[Path] | None = None,
) -> list[str]:
    """`devices`: the GPU device nodes to bind (the attempt's own); None binds every
    /dev/nvidia* (a caller that assigns no GPUs, such as pip's sandbox)."""
    args = [BWRAP, "--die-with-parent", *_namespaces(), "--cap-drop", "ALL"]
    private_tmp = "/tmp"  # noqa: S108 - an empty tmpfs of the sandbox's own
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", private_tmp]
    for folder in _installation_under(Path(private_tmp)):
        args += ["--ro-bind", str(folder), str(folder)]
    args += ["--tmpfs", str(data_dir)]  # after those: a data dir inside them stays hidden
    shown = sorted(glob.glob("/dev/nvidia*")) if devices is None else map(str, devices)
    for device in shown:  # CUDA needs its device nodes
        args += ["--dev-bind", device, device]
    for folder in readable:
        args += ["--ro-bind", str(folder), str(folder)]
    for folder in writable:
        args += ["--bind", str(folder), str(folder)]
    return [*args, "--chdir", str(writable[0]), "--", *command]


def _installation_under(hidden: Path) -> list[Path]:
    """The worker's interpreter, packages and (for an editable install) source tree, where
    they lie under a folder the sandbox replaces with its own (a virtualenv in /tmp): bound
    back read-only, or the ranks would start with no Python to run."""
    import ampfleet  # the package's own location: site-packages, or a source checkout

    candidates = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.executable).resolve().parent.parent,
        Path(ampfleet.__file__).resolve().parent.parent,
        *(Path(p) for p in sys.path if p),
    }
    inside = sorted(p for p in candidates if p.is_dir() and p.resolve().is_relative_to(hidden))
    # The outermost folders only: binding one binds what is under it.
    return [p for p in inside if not any(p != q and p.is_relative_to(q) for q in inside)]
