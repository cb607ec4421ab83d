"""The bubblewrap sandbox of ranks that run bundled code, as one explicit argument list.

Inside: the system read-only, a private /tmp of bounded size, /dev and /proc of its own (own
PID namespace: no view of the agent's or other jobs' processes), the whole data dir and the
homes hidden under empty tmpfs (the SQLite file, other jobs' run folders and checkpoints, the
broker files, the local store, root's files), then only the job's run folder and checkpoint
folder bound back writable and the unpacked bundle read-only. Its processes run as an
unprivileged host uid, never one mapped to root (`Confinement.uid`, dropped to by
core/unprivileged.py where the worker is root), with no capabilities, no new user
namespace, a seccomp filter, and it dies with its parent. A single-node attempt gets a
network namespace of its own with loopback only: nothing of the host's (database, broker,
API, other jobs' rendezvous) is reachable; a multi-node attempt keeps the host's network,
for its peers, under the egress filter of its uid (workers/egress.py, README: threat model).

Standard library only: the API asks `bubblewrap_problem` before it accepts bundled code.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

BWRAP = "bwrap"
NOBODY = 65534
HIDDEN_HOMES = (Path("/root"), Path("/home"))


def bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot contain ranks on this machine, or None when it can."""
    return _problem_of(shutil.which(BWRAP))


@lru_cache
def _problem_of(path: str | None) -> str | None:
    if path is None:
        return "bubblewrap (bwrap) is not installed"
    trial = [
        *(path, *_namespaces(), "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc"),
        *("--", "true"),
    ]
    try:
        result = subprocess.run(trial, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run: {exc}"
    if result.returncode != 0:
        return f"bwrap cannot run: {result.stderr.decode(errors='replace').strip()[:300]}"
    return None


def _namespaces() -> list[str]:
    """Namespaces of their own: as root, bwrap needs no user namespace (the launcher drops
    to an unprivileged host uid itself, see `drop_to`); otherwise bwrap makes one, mapping
    the sandbox's uid to the worker's own, unprivileged one, and allows no further one."""
    shared = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() == 0:
        return shared
    ids = ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    return [*shared, "--unshare-user", "--disable-userns", *ids]


@dataclass(frozen=True)
class Confinement:
    """What a sandbox gives beyond its folders."""

    uid: int | None = None
    """The unprivileged host uid (and gid) its processes drop to, where the worker is root."""
    own_network: bool = True
    """A network namespace of its own with loopback only; False: the host's (multi-node)."""
    tmp_bytes: int = 1 << 30
    """The size of its RAM-backed /tmp (its pages count against the memory cgroup too)."""
    seccomp_fd: int | None = None
    """A descriptor of the compiled seccomp program bwrap installs (workers/seccomp_policy)."""


def sandboxed(
    command: list[str],
    *,
    data_dir: Path,
    writable: list[Path],
    readable: list[Path],
    devices: list[Path] | None = None,
    confinement: Confinement | None = None,
) -> list[str]:
    """`devices`: the GPU device nodes to bind (the attempt's own); None binds every
    /dev/nvidia*. The homes of root and of users are hidden like the data dir, with the
    worker's installation bound back where it lies under them (a pyenv in /root)."""
    how = confinement or Confinement()
    args = [BWRAP, "--die-with-parent", *_namespaces()]
    if how.own_network:
        args.append("--unshare-net")
    if os.geteuid() != 0:
        args += ["--cap-drop", "ALL"]  # as root, `drop_to` ends with no capability at all
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    private_tmp = "/tmp"  # noqa: S108 - an empty tmpfs of the sandbox's own
    args += ["--size", str(how.tmp_bytes), "--perms", "1777", "--tmpfs", private_tmp]
    hidden = [Path(private_tmp), *(home for home in HIDDEN_HOMES if home.is_dir()), data_dir]
    for home in hidden[1:-1]:
        args += ["--perms", "0755", "--tmpfs", str(home)]
    for folder in installation_under(hidden[:-1]):
        args += [*_reachable(folder, hidden), "--ro-bind", str(folder), str(folder)]
    # After those: a data dir inside them stays hidden.
    args += ["--perms", "0755", "--tmpfs", str(data_dir)]
    shown = sorted(glob.glob("/dev/nvidia*")) if devices is None else map(str, devices)
    for device in shown:  # CUDA needs its device nodes
        args += ["--dev-bind", device, device]
    for folder in readable:
        args += [*_reachable(folder, hidden), "--ro-bind", str(folder), str(folder)]
    for folder in writable:
        args += [*_reachable(folder, hidden), "--bind", str(folder), str(folder)]
    if how.seccomp_fd is not None:
        args += ["--seccomp", str(how.seccomp_fd)]
    if how.uid is not None and os.geteuid() == 0:
        command = [
            sys.executable,
            "-m",
            "ampfleet.core.unprivileged",
            str(how.uid),
            "--",
            *command,
        ]
    # Its first writable folder; a warm sandbox has none yet: its launcher goes to the run
    # folder when it gets its attempt (workers/local_launcher.py).
    workdir = str(writable[0]) if writable else "/"
    return [*args, "--chdir", workdir, "--", *command]


def _reachable(folder: Path, hidden: list[Path]) -> list[str]:
    """Where `folder` lies under a folder the sandbox replaced with an empty tmpfs, its
    parents made world-searchable first (bwrap would make them 0700, and an unprivileged
    uid could not reach what is bound there: the interpreter, its own run folder)."""
    for root in hidden:
        if folder != root and folder.is_relative_to(root):
            parents = reversed(folder.relative_to(root).parents[:-1])
            return [arg for p in parents for arg in ("--perms", "0755", "--dir", str(root / p))]
    return []


def give_to(tree: Path, uid: int) -> None:
    """A folder the node agent made for one sandbox to write (a run folder, a job's
    checkpoints, pip's scratch), owned by that sandbox's uid, links and all (never
    followed). Nothing where the worker is not root: the sandbox is the worker's own uid."""
    if os.geteuid() != 0:
        return
    for folder, dirs, files in os.walk(tree):
        os.lchown(folder, uid, uid)
        for name in (*dirs, *files):
            os.lchown(os.path.join(folder, name), uid, uid)


def open_to_sandboxes(tree: Path) -> None:
    """A tree the node agent made for ranks to read (an unpacked bundle, a dataset, a
    requirements environment), readable and searchable by any uid: the worker's umask makes
    it its owner's alone, and ranks run as unprivileged uids. Only ever bound read-only,
    one job's, into a sandbox; on the host it stays inside the private data dir."""
    for folder, dirs, files in os.walk(tree):
        os.chmod(folder, 0o755)  # noqa: S103 - read-only to sandboxes, in the private data dir  # noqa: S103 - read-only to sandboxes, in the private data dir
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, mode | 0o444 | (0o111 if mode & 0o100 else 0))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]


def installation_under(hidden: list[Path]) -> list[Path]:
    """The worker's interpreter, packages and (for an editable install) source tree, where
    they lie under a folder the sandbox replaces with its own (a virtualenv in /tmp, a pyenv
    in /root): bound back read-only, or the ranks would start with no Python to run.

    The installation is where the interpreter and the `ampfleet` package are imported from,
    and the import path's folders, but for the folder the worker was started in (`python
    -m` puts its current folder on the path) or its script's: those hold whatever the
    worker was started beside (a fleet's logs, a project's .env), not what ranks import,
    unless ampfleet itself is imported from there."""
    import ampfleet  # the package's own location: site-packages, or a source checkout

    package_root = Path(ampfleet.__file__).resolve().parent.parent
    started_in = {Path.cwd().resolve(), Path(sys.argv[0] or ".").resolve().parent}
    candidates = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.executable).resolve().parent.parent,
        package_root,
        *(Path(p) for p in sys.path if p and Path(p).resolve() not in started_in),
    }
    inside = sorted(
        p.resolve()
        for p in candidates
        if p.is_dir() and any(p.resolve().is_relative_to(h) for h in hidden)
    )
    # The outermost folders only: binding one binds what is under it.
    return [p for p in inside if not any(p != q and p.is_relative_to(q) for q in inside)]
