"""How a job's checkpoint folder names one checkpoint: `ckpt-<step, 9 digits>/`, written as
`.ckpt-<step>.partial/` and renamed once complete, by the platform's loop
(training/checkpoint.py) and by a script's rank process alike (training/script_checkpoints.py).
No torch: a plain script's rank process imports it."""

from __future__ import annotations

import re
from pathlib import Path

from ampfleet.core.artifact_names import CHECKPOINT_META

META = CHECKPOINT_META
"""Written last into a platform checkpoint (loop or `ampfleet.train`): it is complete."""
_NAME = re.compile(r"^ckpt-(\d{9})$")


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:09d}"


def partial_path(directory: Path, step: int) -> Path:
    return directory / f".ckpt-{step:09d}.partial"


def steps_available(directory: Path) -> list[int]:
    """The steps of the folder's complete platform checkpoints, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(
        int(m.group(1))
        for p in directory.iterdir()
        if (m := _NAME.match(p.name)) and (p / META).exists()
    )


def latest_step(directory: Path) -> int:
    """The step a launch resumes from: its latest complete checkpoint's, or 0."""
    steps = steps_available(directory)
    return steps[-1] if steps else 0
