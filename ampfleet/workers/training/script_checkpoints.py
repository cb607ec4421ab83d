"""A plain script's own files in the job's checkpoint folder, carried across its attempts.

A script saves what it saves (`torch.save(state, $AMPFLEET_CHECKPOINT_DIR/last.pt)`); the
folder is the node's, and a restart may run on another node. So when the script exits
without having succeeded (preempted, killed, failed), rank 0's rank process moves its files
(the regular files at the folder's top level, with names the archive takes: letters,
digits, `. _ -`) into a checkpoint folder of the platform's own layout, `ckpt-<step>/`
with a `_script_snapshot.json` beside them, and names it in an `artifact` record: the node
agent uploads it as it uploads the loop's checkpoints, and restores the newest one onto
whichever node runs the next attempt. Before the script starts, its files are copied back
where it left them. `<step>` is the last step the platform read off the script's lines.

The move happens only after the script exited, so no file is taken half-written by it
(one it was writing when it was killed is as the kill left it). Subfolders and files the
script writes on other nodes are not carried; a script using `ampfleet.train` saves with
session.save() and none of this applies (rank 0's session marker says so).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from pathlib import Path

from ampfleet.workers.checkpoint_archive import is_file_name
from ampfleet.workers.checkpoint_folders import checkpoint_path, partial_path
from ampfleet.workers.stored_checkpoints import STORED_FILE

SNAPSHOT_MARKER = "_script_snapshot.json"
"""In a checkpoint folder of a script's files: the step and the files' names."""
_RESTORE_LOCK = ".script-restore.lock"
_RESTORED_STAMP = ".script-restored"
_CHECKPOINT = re.compile(r"^ckpt-(\d{9})$")


def script_files(folder: Path) -> list[Path]:
    """The script's own files at the folder's top level, as the archive can carry them."""
    if not folder.is_dir():
        return []
    found = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        platform_file = entry.name in (STORED_FILE, SNAPSHOT_MARKER)
        if platform_file or not is_file_name(entry.name) or entry.name.startswith("."):
            continue
        if entry.is_file() and not entry.is_symlink():
            found.append(entry)
    return found


def snapshot(folder: Path, step: int) -> list[Path]:
    """Moves the script's files into `ckpt-<step>/` (replacing one of that step) and drops
    older snapshots; returns the snapshot's files, none when the script left none."""
    files = script_files(folder)
    if not files:
        return []
    partial, final = partial_path(folder, step), checkpoint_path(folder, step)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for path in files:
        path.replace(partial / path.name)  # a rename: instant, whatever the size
    names = [path.name for path in files]
    (partial / SNAPSHOT_MARKER).write_text(json.dumps({"step": step, "files": names}))
    _fsync(partial)
    if final.exists():
        shutil.rmtree(final)
    partial.replace(final)
    for older, _ in snapshots(folder):
        if older != final:  # the store has it, or a newer one supersedes it
            shutil.rmtree(older, ignore_errors=True)
    _fsync(folder)
    return [final / name for name in [*names, SNAPSHOT_MARKER]]


def snapshots(folder: Path) -> list[tuple[Path, int]]:
    """The folder's script snapshots, oldest first."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _CHECKPOINT.match(entry.name)
        if match and (entry / SNAPSHOT_MARKER).is_file():
            found.append((entry, int(match.group(1))))
    return sorted(found, key=lambda item: item[1])


def put_back(folder: Path, attempt: int) -> int | None:
    """Copies the newest snapshot's files back to the folder's top level (each file whole,
    renamed into place), once per attempt and node: the node's first rank does it, under a
    lock, the others wait for it and find it done. Returns the snapshot's step, or None."""
    if not folder.is_dir():
        return None
    with (folder / _RESTORE_LOCK).open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = snapshots(folder)
        if not found:
            return None
        newest, step = found[-1]
        stamp = folder / _RESTORED_STAMP
        done = f"{attempt}:{step}"
        if stamp.exists() and stamp.read_text() == done:
            return step
        names = json.loads((newest / SNAPSHOT_MARKER).read_text()).get("files", [])
        for name in names:
            source = newest / str(name)
            if is_file_name(str(name)) and source.is_file() and not source.is_symlink():
                partial = folder / f".{name}.restoring"
                shutil.copyfile(source, partial)
                partial.replace(folder / str(name))
        stamp.write_text(done)
        return step


def _fsync(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
