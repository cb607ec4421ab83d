"""File modes: what under a folder the owner's group or others could read or enter."""

from __future__ import annotations

import stat
from pathlib import Path


def readable_by_others(root: Path) -> list[str]:
    """`root` and everything under it whose mode gives any access to group or others."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root)} {stat.filemode(mode)}")
    return found
