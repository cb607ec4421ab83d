"""What the artifact store holds of a job's checkpoints, as the node agent tells the ranks.

Rank 0 keeps the job's last K checkpoints (checkpoint.keep_last) and deletes older ones, but
one the store has not listed yet is the only copy there is: deleted before its upload, a node
lost after it resumes elsewhere from an older one. So the agent writes `stored.json` into the
job's checkpoint folder: the step of the newest checkpoint the store lists for the job (null
while it lists none), before every launch and after each checkpoint it lists; rank 0 reads it
whenever it prunes (checkpoint.prune). No file: no agent uploads this run's checkpoints (a
local run), and keep-last-K is the whole rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ampfleet.workers import beneath

STORED_FILE = "stored.json"
MAX_BYTES = 1024


@dataclass(frozen=True)
class Stored:
    newest_step: int | None
    """The step of the newest checkpoint the store lists; None: none yet, or not known."""


def tell_ranks(folder: Path, newest_step: int | None) -> None:
    """The agent's side. The folder is the ranks' to write: a link they plant there is
    replaced, never followed."""
    beneath.write_atomic(folder, STORED_FILE, json.dumps({"newest_step": newest_step}).encode())


def read(folder: Path) -> Stored | None:
    """Rank 0's side: None without the file; one it cannot make sense of says nothing is
    stored (keep what awaits upload)."""
    try:
        with (folder / STORED_FILE).open("rb") as file:
            document = json.loads(file.read(MAX_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return Stored(None)
    step = document.get("newest_step") if isinstance(document, dict) else None
    return Stored(step if isinstance(step, int) and not isinstance(step, bool) else None)
