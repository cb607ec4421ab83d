"""A checkpoint becomes the resume point only once the records of the steps it covers are on
disk: a resumed attempt never reports those steps again, so records still buffered in the
rank when it dies would be lost for good."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ampfleet.workers.rundir import RecordReader
from ampfleet.workers.training import checkpoint
from tests.support.localranks import run_ranks
from tests.support.training import train_recipe


def _records_cover_every_checkpoint(out: Path) -> bool:
    """Called by rank 0 between steps, right after any checkpoint of that step."""
    on_disk = {
        r["step"]
        for r in RecordReader(out / "events.jsonl").read_new()
        if r["kind"] == "metrics" and "loss" in r["values"]
    }
    for step in checkpoint.steps_available(out / "checkpoints"):
        missing = sorted(set(range(1, step + 1)) - on_disk)
        assert not missing, f"checkpoint at step {step} published before steps {missing}"
    return False


def _entry(rank: int, world_size: int, out: str) -> dict:
    check = partial(_records_cover_every_checkpoint, Path(out)) if rank == 0 else None
    return train_recipe(
        rank,
        world_size,
        out,
        precision="fp32",
        max_steps=30,
        checkpoint_every=5,
        flush_s=3600.0,  # only what the loop itself makes durable reaches the file
        stop_requested=check,
    )


def test_a_checkpoint_is_published_only_after_the_records_before_it(tmp_path: Path) -> None:
    run_ranks(partial(_entry, out=str(tmp_path)), 2)
    assert checkpoint.steps_available(tmp_path / "checkpoints")[-1] == 30


def _every_evaluation_so_far_on_disk(out: Path, calls: list[int]) -> bool:
    """Called by rank 0 every STOP_CHECK_EVERY (10) steps, right after that step's
    evaluation (every 10 steps, up to the last step, which has its own at the end)."""
    calls.append(len(calls) + 1)
    evaluated = {
        r["step"]
        for r in RecordReader(out / "events.jsonl").read_new()
        if r["kind"] == "metrics" and "val_accuracy" in r["values"]
    }
    assert evaluated == {10 * n for n in calls}, f"after step {10 * len(calls)}: {evaluated}"
    return False


def _evaluating_entry(rank: int, world_size: int, out: str) -> dict:
    check = partial(_every_evaluation_so_far_on_disk, Path(out), [])
    return train_recipe(
        rank,
        world_size,
        out,
        precision="fp32",
        max_steps=25,
        eval_every=10,
        flush_s=3600.0,  # longer than the run: only the loop's own flushes reach the file
        stop_requested=check,
    )


def test_an_evaluation_leaves_the_rank_before_its_next_step(tmp_path: Path) -> None:
    """A sweep's pruner and a metric goal act on evaluations: one that waited in the rank's
    buffer for the next logging interval let a trial that was to be pruned go on training."""
    run_ranks(partial(_evaluating_entry, out=str(tmp_path)), 1)
    steps = [r["step"] for r in RecordReader(tmp_path / "events.jsonl").read_new() if "step" in r]
    assert max(steps) == 25
