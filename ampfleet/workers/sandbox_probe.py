"""What a hostile tenant's code tries from inside the sandbox, as one standalone program.

`python -m ampfleet.workers.sandbox_probe '<json>'` runs every probe it is asked for and
prints one JSON object: for each probe, what happened ("refused: <error>", "killed by
signal 9", or what it got). Standard library only, so it runs in any rank's interpreter.
The node's self check (doctor.py) and the security tests run it inside the sandbox exactly
as ranks are launched, and judge the result there: this program only reports.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

MB = 1 << 20


def _attempt(action: Callable[[], object]) -> str:
    try:
        return f"done: {action()!r}"[:300]
    except BaseException as exc:  # a probe never ends the program
        return f"refused: {type(exc).__name__}: {exc}"[:300]


def _connect(host: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        sock.connect((host, port))
    return "connected"


def _syscall(name: str, *args: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) == 0:
        return "allowed"
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _in_child(code: str) -> str:
    """A probe that may get its process killed (memory), run in a child of its own."""
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, timeout=120
    )
    if done.returncode < 0:
        return f"killed by signal {-done.returncode}"
    tail = done.stdout.decode(errors="replace").strip()[-200:]
    return f"exited {done.returncode}: {tail}"


def _list(path: str) -> list[str]:
    return sorted(os.listdir(path))[:5]


def _read(path: str) -> int:
    with open(path, "rb") as file:
        return len(file.read(64))


def _fill(path: str, megabytes: int) -> str:
    with open(path, "wb") as out:
        for _ in range(megabytes):
            out.write(b"\0" * MB)
            out.flush()
    return f"wrote {megabytes} MB"


def _shared_memory(megabytes: int) -> str:
    code = (
        "import mmap\n"
        f"m = mmap.mmap(-1, {megabytes * MB}, flags=mmap.MAP_SHARED)\n"
        f"for i in range(0, {megabytes * MB}, 4096): m[i] = 1\n"
        "print('touched')\n"
    )
    return _in_child(code)


def run(request: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {"uid": str(os.getuid()), "gid": str(os.getgid())}
    for path in request.get("read", []):
        found[f"read {path}"] = _attempt(partial(_read, path))
    for path in request.get("list", []):
        found[f"list {path}"] = _attempt(partial(_list, path))
    for host, port in request.get("connect", []):
        found[f"connect {host}:{port}"] = _attempt(partial(_connect, host, int(port)))
    found["new user namespace"] = _attempt(lambda: _syscall("unshare", 0x10000000))
    found["ptrace"] = _attempt(lambda: _syscall("ptrace", 16, os.getppid(), 0, 0))
    found["mount"] = _attempt(lambda: _syscall("mount", 0, 0, 0, 0, 0))
    tmp_mb, file_mb, shared_mb = (
        int(request.get(k) or 0) for k in ("tmp_mb", "file_mb", "shared_mb")
    )
    if tmp_mb:
        found["fill /tmp"] = _attempt(lambda: _fill("/tmp/probe-fill", tmp_mb))  # noqa: S108
    if file_mb and (folder := request.get("writable")):
        target = os.path.join(folder, "probe-fill")
        found["one big file"] = _attempt(lambda: _fill(target, file_mb))
    if shared_mb:
        found["shared memory"] = _shared_memory(shared_mb)
    found["mmap"] = _attempt(lambda: len(mmap.mmap(-1, 4096)))  # the sandbox still works
    return found


def main() -> None:
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)


if __name__ == "__main__":
    main()
