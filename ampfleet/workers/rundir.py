"""The folder one attempt runs in: how the node agent and the rank processes talk.

    <runs>/<job_id>/attempt-<n>/node-<node rank>/
        job.json            what to run (written by the agent before launch)
        events.jsonl        rank 0's records: started, metric, progress, event (appended)
        forwarded.json      how far the node agent has stored each file (see ForwardedOffsets)
        failure-rank<r>.json  why a rank failed, in words a user can act on
        logs/               rank-<r>.stdout / rank-<r>.stderr, launcher.log (torchrun)
        outputs/            files the recipe writes (`output_dir`), listed as artifacts
        export/             rank 0's model export of a completed run (model + manifest)
        profile-request.json  the job's open profile, kept by the agent (profile_request.py)
        profiles/<id>/      a profile's files, each under its artifact name (rank traces, summary)

Keeping the ranks off the database means a database hiccup never kills training, and one
agent per node batches every job's metrics into few transactions.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FALLBACK_REASONS = {"precision_fallback": "precision", "allreduce_fallback": "allreduce_dtype"}
"""The reasons of rank 0's fallback events -> the manifest entry each belongs under."""


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

    @property
    def output_dir(self) -> Path:
        return self.path / "outputs"

    @property
    def export_dir(self) -> Path:
        return self.path / "export"

    def rank_log(self, rank: int, stream: str) -> Path:
        return self.logs_dir / f"rank-{rank}.{stream}"

    def rank_logs(self) -> list[tuple[int, str, Path]]:
        found = []
        for path in sorted(self.logs_dir.glob("rank-*.std*")):
            rank, _, stream = path.name.removeprefix("rank-").partition(".")
            if rank.isdigit() and stream in ("stdout", "stderr"):
                found.append((int(rank), stream, path))
        return found

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
    """Rank 0 appends JSON lines, buffered and flushed at most every `flush_s` seconds.

    `sync` makes every record written so far durable (flushed and fsynced): the loop calls
    it before it publishes a checkpoint, so no resume point ever covers a step whose records
    could still be lost with the process or the host.
    """

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

    def sync(self) -> None:
        self.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self.sync()
        self._file.close()


class LineTail:
    """Complete lines appended to a file (a partial last line waits), read transactionally.

    Reads continue from a pending position; `commit` makes it the committed one once what
    was read is stored, and `rollback` returns to the committed one, so a failed database
    transaction reads the same lines again instead of forgetting them.
    """

    def __init__(self, path: Path, max_bytes: int = 1 << 20, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        """Where the next pass starts: everything before it is stored."""
        self._pending = offset
        self._max_bytes = max_bytes

    def read_lines(self) -> list[bytes]:
        try:
            with self.path.open("rb") as file:
                file.seek(self._pending)
                data = file.read(self._max_bytes)
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == self._max_bytes:
            end = len(data)  # one enormous line: take it in pieces rather than stall
        self._pending += end
        return data[:end].splitlines()

    @property
    def moved(self) -> bool:
        return self._pending != self.offset

    def commit(self) -> None:
        self.offset = self._pending

    def rollback(self) -> None:
        self._pending = self.offset


class RecordReader(LineTail):
    """The agent's side of the records file: JSON lines appended since the last read."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        super().__init__(path, max_bytes=64 << 20, offset=offset)

    def read_new(self) -> list[dict[str, Any]]:
        records = []
        for line in self.read_lines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records


class ForwardedOffsets:
    """How far each of a folder's files has been stored, kept in the folder itself.

    Whoever forwards a folder writes it after each commit; whoever finds a folder whose
    forwarder died (the next attempt of the job) continues from it, so output that was on
    disk but not yet stored is stored once, not lost and not repeated. A crash between a
    commit and this write repeats at most that one batch.
    """

    def __init__(self, run_dir: RunDir) -> None:
        self._file = run_dir.path / "forwarded.json"
        self._root = run_dir.path

    def load(self) -> dict[Path, int]:
        try:
            saved = json.loads(self._file.read_text())
        except (OSError, ValueError):
            return {}
        return {self._root / name: int(offset) for name, offset in saved.items()}

    def save(self, tails: list[LineTail]) -> None:
        saved = {str(t.path.relative_to(self._root)): t.offset for t in tails}
        tmp = self._file.with_name(f".{self._file.name}.tmp")
        tmp.write_text(json.dumps(saved))
        tmp.replace(self._file)
