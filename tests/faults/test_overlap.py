"""The soak's overlap checks find what they look for (and nothing else)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from tests.faults.overlap import (
    attempts_that_trained_at_once,
    held_after_the_next_attempt,
    nodes_over_their_slots,
)

T0 = datetime(2026, 1, 1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def write_records(data_dir: Path, job_id: str, attempt: int, times: list[float]) -> None:
    folder = data_dir / "runs" / job_id / f"attempt-{attempt}" / "node-0"
    folder.mkdir(parents=True)
    lines = [json.dumps({"kind": "metric", "time": t}) for t in times]
    (folder / "events.jsonl").write_text("\n".join(lines) + '\n{"kind": "met')


def test_an_attempt_writing_after_the_next_one_began_is_found(tmp_path: Path) -> None:
    write_records(tmp_path, "job_apart", 1, [10.0, 11.0])
    write_records(tmp_path, "job_apart", 2, [15.0, 16.0])
    write_records(tmp_path, "job_twice", 1, [10.0, 20.0])  # an orphan kept training
    write_records(tmp_path, "job_twice", 2, [15.0, 16.0])
    jobs = ["job_apart", "job_twice", "job_never_ran"]
    assert attempts_that_trained_at_once(tmp_path, jobs) == ["job_twice"]


def test_a_slot_lent_twice_is_found_and_a_handover_is_not() -> None:
    rows = [
        ("job_a", 1, "node-a", 1, at(0), at(5)),
        ("job_b", 1, "node-a", 1, at(5), at(9)),  # placed the instant the slot came back
        ("job_c", 1, "node-b", 1, at(0), None),
        ("job_d", 1, "node-b", 1, at(3), at(4)),  # node-b's one slot was still held
    ]
    [found] = nodes_over_their_slots(rows, slots=1)
    assert found.startswith("node-b at ")
    assert "job_c attempt 1" in found
    assert "job_d attempt 1" in found
    assert nodes_over_their_slots(rows, slots=2) == []


def test_rows_held_past_the_next_attempts_placement_are_counted() -> None:
    rows = [
        ("job_a", 1, "node-a", 1, at(0), at(8)),  # released after attempt 2 was placed
        ("job_a", 2, "node-b", 1, at(6), at(20)),
        ("job_b", 1, "node-a", 1, at(0), at(5)),
        ("job_b", 2, "node-c", 1, at(6), None),
    ]
    assert held_after_the_next_attempt(rows) == 1
