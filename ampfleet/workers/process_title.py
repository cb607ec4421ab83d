"""The command line a forked rank shows (`ps`, /proc/<pid>/cmdline), and how the node agent
reads a rank's number back from it.

A rank started as an interpreter of its own says what it is in its arguments and its
environment (RANK). One forked from a warm launcher (local_launcher.py) inherits the
launcher's arguments and its original environment block, which is what /proc shows,
whatever it sets later. So the launcher is started with room in its arguments and each
process writes its own title there, in place: the kernel shows a process's command line
from the memory its arguments were first given in. Standard library only.
"""

from __future__ import annotations

import ctypes
import re

TITLE_ROOM = 1024
"""Bytes of arguments a warm launcher is started with to hold a title (a run folder's path
and a few words)."""
ROOM_ARGUMENT = "--title-room=" + "." * TITLE_ROOM
_RANK_TITLE = re.compile(r"^ampfleet rank (\d+): ")


def set_title(title: str) -> bool:
    """Writes `title` over this process's original arguments, if it fits; whether it did."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48, 49
    encoded = title.encode()
    if len(encoded) + 1 > end - start:
        return False
    # Spaces, not NULs, after it: tools then read one command line, not a thousand
    # empty arguments.
    ctypes.memmove(start, encoded.ljust(end - start - 1, b" ") + b"\0", end - start)
    return True


def rank_title(rank: int, entry: str, run_dir: str) -> str:
    """Its number, then the command a cold rank runs."""
    return f"ampfleet rank {rank}: -m {entry} {run_dir}"


def launcher_title(run_dir: str) -> str:
    return f"ampfleet launcher {run_dir}"


def rank_of_title(cmdline: list[str]) -> int | None:
    """The rank a forked rank's title names, or None for any other command line."""
    match = _RANK_TITLE.match(" ".join(cmdline))
    return int(match.group(1)) if match else None
