"""The checkpoint a job's `init_from` starts it from, on a node.

The API resolved it at submit to one listed checkpoint (its object's sha256 and step). It
is fetched once per node by content into `<data dir>/initial/<sha256>/ckpt-<step>/`, its
archive checked and unpacked as the job's own checkpoints are (checkpoint_archive.py), and
bound read-only into the job's sandbox: the ranks read it, and only while the job has no
checkpoint of its own (a restart resumes that one, and needs nothing fetched).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ampfleet.core.settings import Settings
from ampfleet.workers.bundles import cache_dir, fetch_once
from ampfleet.workers.checkpoint_archive import unpack
from ampfleet.workers.checkpoint_folders import checkpoint_path


def local_folder(settings: Settings, init: Mapping[str, Any]) -> Path:
    """The folder bound into the sandbox: it holds the one checkpoint folder."""
    return cache_dir(settings, "initial", str(init["sha256"]))


def local_checkpoint(settings: Settings, init: Mapping[str, Any]) -> Path:
    return checkpoint_path(local_folder(settings, init), int(init["step"]))


def for_ranks(settings: Settings, init: Mapping[str, Any]) -> dict[str, Any]:
    """What the job file tells the ranks: where the checkpoint is, and what to load of it."""
    return {
        "path": str(local_checkpoint(settings, init)),
        "load": init["load"],
        "job": init["job"],
        "step": int(init["step"]),
    }


def ensure_initial(settings: Settings, init: Mapping[str, Any]) -> Path:
    """The checkpoint folder on this node, fetched and unpacked if not there yet."""

    def fill(downloaded: Path, tree: Path) -> None:
        unpack(downloaded, tree)

    what = f"checkpoint of step {init['step']} of job {init['job']}"
    fetch_once(local_folder(settings, init), str(init["sha256"]), what, fill)
    checkpoint = local_checkpoint(settings, init)
    if not checkpoint.is_dir():
        raise LookupError(f"the {what} holds no folder {checkpoint.name}")
    return checkpoint
