"""Two gloo ranks beat from inside the loop, and a rank slowed in every forward pass is
named a straggler by rank 0 (an event, and the ratio as a metric)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ampfleet.workers.heartbeat import read_beats
from tests.support.localranks import run_ranks
from tests.support.training import records, train_recipe


def _run(rank: int, world_size: int, out_dir: str) -> dict[str, Any]:
    return train_recipe(
        rank,
        world_size,
        out_dir,
        precision="fp32",
        max_steps=12,
        in_run_dir=True,
        slow_rank=(1, 0.05),
        monitoring={
            "straggler_factor": 1.5,
            "straggler_reports": 3,
            "straggler_sustained_s": 0.0,
        },
    )


def test_ranks_beat_and_a_slowed_rank_is_a_straggler(tmp_path: Path) -> None:
    run_ranks(_run, 2, str(tmp_path))

    beats = read_beats(tmp_path)
    assert [b.rank for b in beats] == [0, 1]
    # After the last step each rank evaluated, then wrote the final checkpoint.
    assert {(b.step, b.phase) for b in beats} <= {(12, "evaluate"), (12, "checkpoint")}

    found = records(tmp_path)
    [straggler] = [r for r in found if r["kind"] == "event" and r["reason"] == "straggler"]
    assert straggler["message"].startswith("rank 1 is a straggler")
    ratios = [
        r["values"]["straggler_ratio"]
        for r in found
        if r["kind"] == "metrics" and "straggler_ratio" in r["values"]
    ]
    assert len(ratios) == 12  # every reported step (each one here)
    # Most reports show the gap, not each one: on a loaded machine one step can find rank 0
    # off its core for as long as rank 1's 50 ms sleep (a run of make test saw 1.35 once,
    # between 3.9 and 14.8).
    assert statistics.median(ratios[3:]) > 1.5
