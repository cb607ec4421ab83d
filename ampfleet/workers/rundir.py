"""The folder one attempt runs in: how the node agent and the rank processes talk.

    <runs>/<job_id>/attempt-<n>/node-<node rank>/
        job.json            what to run (written by the agent before launch)
        events.jsonl        rank 0's records: started, metric, progress, event (appended)
        forwarded.json      how far the node agent has stored each file (see ForwardedOffsets)
        failure-rank<r>.json  why a rank failed, in words a user can act on
        logs/               rank-<r>.stdout / rank-<r>.stderr, launcher.log (torchrun)
        outputs/            files the recipe writes (`output_dir`), listed as artifacts
        export/             rank 0's model export of a completed run (model + manifest)
        samples/            what the model generated at each evaluation (step-<step>.txt)
        profile-request.json  the job's open profile, kept by the agent (profile_request.py)
        profiles/<id>/      a profile's files, each under its artifact name (rank traces, summary)
        hyperparameters.json  a script's hyperparameters (script mode: training/script.py)
        session.active      rank 0 of a script adopted `ampfleet.train`: the session writes
                            the records from then on, the script wrapper no longer does

Keeping the ranks off the database means a database hiccup never kills training, and one
agent per node batches every job's metrics into few transactions.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampfleet.workers import beneath
from ampfleet.workers.records import Rejected, parse

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

    @property
    def hyperparameters_file(self) -> Path:
        return self.path / "hyperparameters.json"

    @property
    def session_marker(self) -> Path:
        """Created by rank 0's `ampfleet.train` session as it starts: from then on it writes
        the records, so two writers never interleave in events.jsonl."""
        return self.path / "session.active"

    def rank_log(self, rank: int, stream: str) -> Path:
        return self.logs_dir / f"rank-{rank}.{stream}"

    def rank_logs(self) -> list[tuple[int, str, Path]]:
        found = []
        for name in _files_in(self.path, "logs"):
            rank, _, stream = name.removeprefix("rank-").partition(".")
            if name.startswith("rank-") and rank.isdigit() and stream in ("stdout", "stderr"):
                found.append((int(rank), stream, self.logs_dir / name))
        return sorted(found)

    def failure_file(self, rank: int) -> Path:
        return self.path / f"failure-rank{rank}.json"

    def write_failure(self, rank: int, kind: str, message: str, traceback_tail: str) -> None:
        """A rank's report of why it failed, as `failures` reads it back."""
        record = {
            "rank": rank,
            "time": time.time(),
            "type": kind,
            "message": message[:2000],
            "traceback_tail": traceback_tail[-4000:],
        }
        self.failure_file(rank).write_text(json.dumps(record))

    def failures(self) -> list[dict[str, Any]]:
        """Each rank's report of why it failed, as far as it is one: the ranks write these
        files, so only reports of the right shape count, their words cut to length."""
        found = []
        for name in _files_in(self.path):
            if not (name.startswith("failure-rank") and name.endswith(".json")):
                continue
            try:
                report = json.loads(beneath.read_bytes(self.path, name, 0, MAX_FAILURE_BYTES))
            except (OSError, ValueError, RecursionError):
                continue
            if _is_failure_report(report):
                found.append(
                    {**report, "type": report["type"][:200], "message": report["message"][:2000]}
                )
        return sorted(found, key=lambda f: f["time"])


MAX_FAILURE_BYTES = 64 << 10
PEER_LOST = "PeerLost"
"""The type of a rank's failure report that says it lost a peer (a collective's or the
store's connection broken): the peer's node or ranks died, not this rank's own failure."""


def _is_failure_report(report: object) -> bool:
    return (
        isinstance(report, dict)
        and isinstance(report.get("rank"), int)
        and isinstance(report.get("type"), str)
        and isinstance(report.get("message"), str)
        and isinstance(report.get("time"), int | float)
    )


def _files_in(root: Path, relative: str | None = None) -> list[str]:
    """The regular files of a folder the ranks write, beneath it: none where it is missing
    or was replaced by something else."""
    try:
        return beneath.list_files(root, relative)
    except OSError:
        return []


class RecordWriter:
    """Rank 0 appends JSON lines, buffered: they are flushed once `flush_s` has passed since
    the last flush, by the next write or by the loop's `flush_if_due` between steps.

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
        self.flush_if_due()

    def flush_if_due(self) -> None:
        """Flushes what waited `flush_s` or more: called between steps, so that a record no
        later write follows (the last of a logging interval) still leaves within `flush_s`."""
        if self._buffer and time.monotonic() - self._last_flush >= self._flush_s:
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
    transaction reads the same lines again instead of forgetting them. The file lies in a
    folder the ranks write (`root`): it is read beneath it (beneath.py), and nothing is read
    where it is not a regular file.
    """

    def __init__(
        self, path: Path, max_bytes: int = 1 << 20, offset: int = 0, root: Path | None = None
    ) -> None:
        self.path = path
        self.root = root or path.parent
        self.offset = offset
        """Where the next pass starts: everything before it is stored."""
        self._pending = offset
        self._max_bytes = max_bytes
        self.refused: str | None = None
        """Why the file could not be read, when it was there but not a regular file."""

    def read_lines(self) -> list[bytes]:
        try:
            data = beneath.read_bytes(
                self.root, self.path.relative_to(self.root), self._pending, self._max_bytes
            )
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.refused = str(exc)
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
    """The agent's side of the records file: the records appended since the last read, each
    checked against its kind's schema (records.py). What fails is in `rejected` after the
    read, and is never read again."""

    def __init__(self, path: Path, offset: int = 0, root: Path | None = None) -> None:
        super().__init__(path, max_bytes=64 << 20, offset=offset, root=root)
        self.rejected: list[Rejected] = []
        self._lines: int | None = None  # lines before `offset`, counted when first needed
        self._pending_lines = 0

    def read_new(self) -> list[dict[str, Any]]:
        first = self._line_count() + self._pending_lines
        lines = self.read_lines()
        self._pending_lines += len(lines)
        records: list[dict[str, Any]] = []
        self.rejected = []
        for number, line in enumerate(lines, first + 1):
            if not line.strip():
                continue
            parsed = parse(line, number)
            if isinstance(parsed, Rejected):
                self.rejected.append(parsed)
            else:
                records.append(parsed)
        return records

    def _line_count(self) -> int:
        if self._lines is None:
            self._lines = 0
            if self.offset:  # resumed from a saved position: count the lines before it
                with contextlib.suppress(OSError):
                    relative = self.path.relative_to(self.root)
                    for start in range(0, self.offset, 1 << 24):
                        size = min(1 << 24, self.offset - start)
                        data = beneath.read_bytes(self.root, relative, start, size)
                        self._lines += data.count(b"\n")
        return self._lines

    def commit(self) -> None:
        super().commit()
        self._lines = self._line_count() + self._pending_lines
        self._pending_lines = 0

    def rollback(self) -> None:
        super().rollback()
        self._pending_lines = 0


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
        """The saved positions; the ranks could have rewritten the file, so only entries of
        the right shape count (a wrong one costs the job its own lines, nothing else)."""
        try:
            saved = json.loads(beneath.read_bytes(self._root, self._file.name, 0, 1 << 20))
        except (OSError, ValueError, RecursionError):
            return {}
        if not isinstance(saved, dict):
            return {}
        return {
            self._root / name: offset
            for name, offset in saved.items()
            if isinstance(offset, int) and offset >= 0 and ".." not in name.split("/")
        }

    def save(self, tails: list[LineTail]) -> None:
        saved = {str(t.path.relative_to(self._root)): t.offset for t in tails}
        beneath.write_atomic(self._root, self._file.name, json.dumps(saved).encode())
