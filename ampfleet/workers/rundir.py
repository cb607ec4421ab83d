"""The folder one attempt runs in: how the node agent and the rank processes talk.

    <runs>/<job_id>/attempt-<n>/node-<node rank>/
        job.json            what to run (written by the agent before launch)
        events.jsonl        rank 0's records: started, metric, progress, event (appended)
        failure-rank<r>.json  why a rank failed, in words a user can act on
        logs/               torchrun's per-rank stdout/stderr, launcher.log

Keeping the ranks off the database means a database hiccup never kills training, and one
agent per node batches every job's metrics into few transactions.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def for_attempt(cls, runs_root: Path, job_id: str, attempt: int, node_rank: int) -> RunDir:
        """One folder per node of the attempt: nodes may share a file system."""
        return cls(runs_root / job_id / f"attempt-{attempt}" / f"node-{node_rank}")

    @property
    def job_file(self) -> Path:
        return self.path / "job.json"

    @property
    def events_file(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    def failure_file(self, rank: int) -> Path:
        return self.path / f"failure-rank{rank}.json"

    def failures(self) -> list[dict[str, Any]]:
        found = []
        for file in sorted(self.path.glob("failure-rank*.json")):
            try:
                found.append(json.loads(file.read_text()))
            except (OSError, ValueError):
                continue
        return sorted(found, key=lambda f: f.get("time", 0.0))


class RecordWriter:
    """Rank 0 appends JSON lines, buffered and flushed at most every `flush_s` seconds."""

    def __init__(self, path: Path, flush_s: float) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._flush_s = flush_s
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()

    def write(self, kind: str, **fields: Any) -> None:
        self._buffer.append(json.dumps({"kind": kind, "time": time.time(), **fields}))
        if time.monotonic() - self._last_flush >= self._flush_s:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._file.write("\n".join(self._buffer) + "\n")
            self._file.flush()
            self._buffer.clear()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        self._file.close()


class RecordReader:
    """The agent's side: complete lines appended since the last read."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with self._path.open("rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # leave a partially written last line for next time
        self._offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records
