"""Whether a job ran twice at once or a node lent a slot twice, read from what the fleet left:
the records each attempt's rank 0 wrote into its run folder (with the time of each), and the
allocation rows (job, attempt, node, slots, created, released)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

AllocationRow = Sequence[Any]  # job_id, attempt, node_id, slots, created_at, released_at


def attempts_that_trained_at_once(data_dir: Path, job_ids: Iterable[str]) -> list[str]:
    """Jobs where an attempt's rank 0 wrote a record after a later attempt's had begun."""
    found = []
    for job_id in job_ids:
        times: dict[int, list[float]] = defaultdict(list)
        for events in (data_dir / "runs" / job_id).glob("attempt-*/node-*/events.jsonl"):
            attempt = int(events.parent.parent.name.removeprefix("attempt-"))
            times[attempt] += record_times(events)
        spans = [(min(t), max(t)) for _, t in sorted(times.items()) if t]
        if any(earlier[1] > later[0] for earlier, later in itertools.pairwise(spans)):
            found.append(job_id)
    return found


def record_times(events: Path) -> list[float]:
    times = []
    for line in events.read_text().splitlines():
        try:
            times.append(float(json.loads(line)["time"]))
        except (ValueError, KeyError):
            continue  # the line a killed rank was writing
    return times


def nodes_over_their_slots(allocations: Iterable[AllocationRow], slots: int) -> list[str]:
    """Nodes where the unreleased rows at some moment held more slots than the node has,
    each with the rows held at that moment."""
    rows_of: dict[str, list[AllocationRow]] = defaultdict(list)
    for row in allocations:
        rows_of[row[2]].append(row)
    over = []
    for node_id, rows in rows_of.items():
        for row in rows:  # the moment a row was created, with what else was held then
            created = row[4]
            held = [r for r in rows if r[4] <= created and (r[5] is None or r[5] > created)]
            if sum(r[3] for r in held) > slots:
                over.append(
                    f"{node_id} at {created.isoformat()}: "
                    + "; ".join(
                        f"{r[0]} attempt {r[1]} {r[4].isoformat()}-"
                        f"{r[5].isoformat() if r[5] else 'unreleased'}"
                        for r in held
                    )
                )
                break
    return over


def held_after_the_next_attempt(allocations: Iterable[AllocationRow]) -> int:
    """Attempts whose rows were still held when the job's next attempt was placed (a dead
    node's claimed rows, released by its next worker): counted for the record, not a fault."""
    placed: dict[tuple[str, int], list[tuple[datetime, datetime | None]]] = defaultdict(list)
    for job_id, attempt, _, _, created, released in allocations:
        placed[(job_id, attempt)].append((created, released))
    held = 0
    for (job_id, attempt), rows in placed.items():
        later = placed.get((job_id, attempt + 1))
        if later:
            next_placed = min(created for created, _ in later)
            held += any(released is None or released > next_placed for _, released in rows)
    return held
