"""How a job's checkpoint folder names one checkpoint: `ckpt-<step, 9 digits>/`, written as
`.ckpt-<step>.partial/` and renamed once complete, by the platform's loop
(training/checkpoint.py) and by a script's rank process alike (training/script_checkpoints.py).
Standard library only."""

from __future__ import annotations

from pathlib import Path


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:09d}"


def partial_path(directory: Path, step: int) -> Path:
    return directory / f".ckpt-{step:09d}.partial"
