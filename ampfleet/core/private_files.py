"""What a server process writes is its owner's alone: the data folder is 0700 and every file
and folder made under it 0600/0700 (the SQLite database with its webhook rows, run folders,
rank logs, checkpoints, the admin key). Set once per process, as a umask, so every writer
(SQLite, torch, the ranks the worker launches) is covered without each one asking."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_UMASK = 0o077
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_process_private(data_dir: Path) -> None:
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(data_dir, PRIVATE_DIR_MODE)  # one made earlier, or by hand, may be wider


def write_private_text(path: Path, text: str) -> None:
    """Write `path` readable by its owner only, narrowing a file that exists already before
    anything is written into it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        file.write(text)
