"""How a profile request reaches the ranks: the node agent keeps `profile-request.json` in the
attempt's run folder equal to the job's open profile (profile_handover.py), and rank 0 reads
it at its stop checks (a small read, every few steps; see workers/training/profiling.py).
The ranks import this, so it needs neither torch nor the database.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampfleet.workers.rundir import RunDir

FILE_NAME = "profile-request.json"
MAX_BYTES = 64 << 10
"""More than any request holds (a rank list is at most a few thousand numbers)."""


@dataclass(frozen=True)
class ProfileRequest:
    id: str
    steps: int
    ranks: tuple[int, ...] | None
    """The ranks that trace; None: every rank."""
    record_shapes: bool = False

    def traces(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def to_json(self) -> str:
        ranks = None if self.ranks is None else list(self.ranks)
        body = {"id": self.id, "steps": self.steps, "ranks": ranks}
        return json.dumps({**body, "record_shapes": self.record_shapes})

    @classmethod
    def from_json(cls, text: str | bytes) -> ProfileRequest | None:
        """None for anything that is not a whole request (the file is the agent's alone, so
        this is only ever a file from another version of it)."""
        try:
            data: Any = json.loads(text)
            ranks = data["ranks"]
            return cls(
                id=str(data["id"]),
                steps=int(data["steps"]),
                ranks=None if ranks is None else tuple(int(r) for r in ranks),
                record_shapes=bool(data.get("record_shapes", False)),
            )
        except (ValueError, TypeError, KeyError):
            return None


def request_file(run_dir: RunDir) -> Path:
    return run_dir.path / FILE_NAME


def read_request(run_dir: RunDir) -> ProfileRequest | None:
    try:
        with request_file(run_dir).open("rb") as file:
            return ProfileRequest.from_json(file.read(MAX_BYTES))
    except OSError:
        return None
