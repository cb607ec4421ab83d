"""`allreduce_dtype: auto` across a job's attempts, on real gloo ranks: a restart that
resumes a checkpoint keeps the dtype the job measured, and one on another world measures
again and says why; it never changes silently."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest

from tests.support.localranks import RankFailedError, run_ranks
from tests.support.training import dump, records, train_recipe

# As entry.py resolves `auto` on gloo ranks computing in bf16.
AUTO = {
    "precision": "bf16",
    "allreduce_dtype": "bf16",
    "requested_allreduce_dtype": "auto",
    "checkpoint_every": 10,
}


def _entry(rank: int, world_size: int, out: str, kwargs: dict):
    return train_recipe(rank, world_size, out, **kwargs)


def _attempt(out: Path, world_size: int, **kwargs) -> list[dict]:
    """Runs one attempt on `world_size` ranks; rank 0's records of that attempt."""
    before = len(records(out)) if (out / "events.jsonl").exists() else 0
    run = partial(_entry, out=str(out), kwargs={**AUTO, **kwargs})
    if "crash_call" in kwargs:
        with pytest.raises(RankFailedError, match="injected crash"):
            run_ranks(run, world_size)
    else:
        run_ranks(run, world_size)
    return records(out)[before:]


def _auto_events(attempt: list[dict]) -> list[str]:
    return [r["message"] for r in attempt if r.get("reason") == "allreduce_auto"]


def _started(attempt: list[dict]) -> dict:
    [started] = [r for r in attempt if r["kind"] == "started"]
    return started


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_a_restart_keeps_the_auto_allreduce_dtype_it_measured(tmp_path: Path) -> None:
    first = _attempt(tmp_path, 2, max_steps=30, crash_call=25)  # dies after step 20's save
    [measured] = _auto_events(first)
    chose = re.search(r"chose (\w+)(?: by the (swap|ring|gloo) wire)?$", measured)
    assert chose, measured
    dtype = chose.group(1)
    assert _started(first)["allreduce_dtype"] == dtype

    second = _attempt(tmp_path, 2, max_steps=30, attempt=2)
    assert _started(second)["resumed_from_step"] == 20
    # Kept, not measured again: timings on a busy machine would pick either dtype.
    [kept] = _auto_events(second)
    assert kept.startswith(f"kept {dtype}, the choice the checkpoint of step 20"), dump(kept)
    assert measured in kept  # with the figures it was chosen on
    assert _started(second)["allreduce_dtype"] == dtype
    assert [r["allreduce_dtype"] for r in second if r["kind"] == "setup"] in ([], [dtype])

    # On another world the figures say nothing: it measures again, and says so.
    third = _attempt(tmp_path, 3, max_steps=40, attempt=3)
    assert _started(third)["resumed_from_step"] == 30
    [again] = _auto_events(third)
    assert again.startswith("auto AllReduce measured on"), again
    assert again.endswith(
        f"measured again: the earlier choice ({dtype}) was measured on 2 gloo ranks"
    )


@pytest.mark.parametrize("attempt", [1, 2])
def test_an_attempt_without_a_checkpoint_to_continue_measures(tmp_path: Path, attempt: int) -> None:
    [event] = _auto_events(_attempt(tmp_path, 2, max_steps=4, attempt=attempt))
    assert event.startswith("auto AllReduce measured on")
    restart_note = "measured again: no checkpoint of an earlier attempt carries its choice"
    assert event.endswith(restart_note) == (attempt > 1), event
