"""Atomic, job-scoped checkpoints that load with `weights_only=True`.

Rank 0 writes the model, optimizer, scaler, step and the precision/communication setup;
every rank writes its own RNG state. Each file is written to a temporary name, fsynced and
renamed, so a crash mid-write leaves the previous checkpoint intact. The last K are kept.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import torch

from ampfleet.core.artifact_names import checkpoint_name

FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d{9})\.pt$")


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as file:
        torch.save(obj, file)
        file.flush()
        os.fsync(file.fileno())
    tmp.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:09d}.pt"


def rng_path(directory: Path, step: int, rank: int) -> Path:
    return directory / f"rng-{step:09d}-rank{rank}.pt"


def save(directory: Path, step: int, state: dict[str, Any], *, rank: int, keep_last: int) -> None:
    """Called on every rank: rank 0 saves `state`, every rank its RNG; then prunes."""
    directory.mkdir(parents=True, exist_ok=True)
    _atomic_save(capture_rng(), rng_path(directory, step, rank))
    if rank == 0:
        _atomic_save(
            {"format": FORMAT_VERSION, "step": step, **state}, checkpoint_path(directory, step)
        )
        prune(directory, keep_last)


def artifact_record(directory: Path, step: int, lineage: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's `artifact` record of the checkpoint at `step`, once every rank's files of it
    are written: the node agent uploads them as one object, listed with `lineage`."""
    paths = [*sorted(directory.glob(f"rng-{step:09d}-rank*.pt")), checkpoint_path(directory, step)]
    return {
        "artifact_kind": "checkpoint",
        "name": checkpoint_name(step),
        "paths": [str(path) for path in paths],
        "step": step,
        "details": lineage,
    }


def steps_available(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _NAME.match(p.name)))


def latest(directory: Path) -> Path | None:
    steps = steps_available(directory)
    return checkpoint_path(directory, steps[-1]) if steps else None


def load(path: Path, map_location: torch.device | str = "cpu") -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=True)
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path.name}: unsupported checkpoint format {state.get('format')}")
    return state


def prune(directory: Path, keep_last: int) -> None:
    for step in steps_available(directory)[:-keep_last]:
        checkpoint_path(directory, step).unlink(missing_ok=True)
        for rng_file in directory.glob(f"rng-{step:09d}-rank*.pt"):
            rng_file.unlink(missing_ok=True)


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(directory: Path, step: int, rank: int) -> bool:
    path = rng_path(directory, step, rank)
    if not path.exists():
        return False
    state = torch.load(path, map_location="cpu", weights_only=True)
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    return True


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
