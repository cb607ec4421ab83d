"""What an attempt's folders hold on this node's disk, measured by the node agent.

The run and checkpoint folders are the ranks' to fill, and the file systems they lie on
rarely offer a quota per folder. So the agent walks them (never following a link, never
past `MAX_ENTRIES` entries) every few seconds and stops an attempt that holds more than its
limit; RLIMIT_FSIZE (limits.py) keeps any one file from outgrowing it between two walks.
Allocated blocks count, not apparent sizes: a sparse file costs what it uses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRIES = 200_000
CHECK_EVERY_S = 5.0


@dataclass(frozen=True)
class Usage:
    bytes: int
    entries: int

    @property
    def complete(self) -> bool:
        """False: the walk stopped at MAX_ENTRIES (which is over any sane limit itself)."""
        return self.entries < MAX_ENTRIES


def usage(folders: Iterable[Path]) -> Usage:
    total, entries = 0, 0
    pending = [str(folder) for folder in folders]
    while pending and entries < MAX_ENTRIES:
        try:
            listing = os.scandir(pending.pop())
        except OSError:
            continue
        with listing:
            for entry in listing:
                entries += 1
                if entries >= MAX_ENTRIES:
                    break
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return Usage(total, entries)
