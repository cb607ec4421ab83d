"""`allreduce_dtype: auto` across a job's attempts, on real gloo ranks: a restart that
resumes a checkpoint keeps the dtype and the wire the job measured, and one on another world
measures again and says why; it never changes silently."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ampfleet.workers.checkpoint_folders import META
from ampfleet.workers.training import checkpoint, ring
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


# Each half-precision wire's entry point in ring.py, as wire_average_ calls it.
WIRES = {
    "swap": "pipelined_pair_average_",
    "ring": "ring_average_",
    "gloo": "gloo_average_",
}


def _counting_wires(rank: int, world_size: int, out: str, kwargs: dict) -> dict[str, int]:
    """One rank's attempt; how many buckets each wire reduced for the gradient hook (on
    its communication thread: `auto`'s measurement at start runs every wire too, on the
    rank's own thread)."""
    used: Counter[str] = Counter()

    def counted(name: str, reduce: Callable[..., Any]) -> Callable[..., Any]:
        def wire(*args: Any, **kw: Any) -> Any:
            if threading.current_thread().name == "allreduce":
                used[name] += 1
            return reduce(*args, **kw)

        return wire

    for name, function in WIRES.items():  # this rank's process only, for this run
        setattr(ring, function, counted(name, getattr(ring, function)))
    train_recipe(rank, world_size, out, **kwargs)
    return dict(used)


def _attempt_counting_wires(out: Path, **kwargs: Any) -> tuple[list[dict], list[dict[str, int]]]:
    """An attempt on two ranks: rank 0's records of it, and each rank's wire counts."""
    before = len(records(out)) if (out / "events.jsonl").exists() else 0
    run = partial(_counting_wires, out=str(out), kwargs={**AUTO, **kwargs})
    used = run_ranks(run, 2)
    return records(out)[before:], used


def _chosen_wire(event: str) -> str | None:
    chose = re.search(r"chose (\w+)(?: by the (\w+) wire)?", event)
    assert chose, event
    return chose.group(2)


def test_a_restart_reduces_by_the_wire_its_checkpoint_was_made_under(tmp_path: Path) -> None:
    """The buckets go over the wire the choice names, before and after a restart: the
    first attempt's measured one, then the one its checkpoint carries (made here another
    wire than measured, as a measurement on another day's load could have taken), not the
    default and not a fresh measurement."""
    first, used = _attempt_counting_wires(tmp_path, max_steps=2, checkpoint_every=2)
    [measured] = _auto_events(first)
    assert measured.startswith("auto AllReduce measured on"), measured
    assert "measured again" not in measured  # a first attempt: nothing to measure again
    wire = _chosen_wire(measured)
    expected = {wire: 2} if wire else {}  # fp32 chosen: the backend's own all_reduce
    assert used == [expected] * 2, (measured, used)  # steps 1 and 2, one bucket each

    latest = checkpoint.latest(tmp_path / "checkpoints")
    assert latest is not None
    meta = json.loads((latest / META).read_text())
    kept = "gloo" if wire != "gloo" else "ring"
    meta["allreduce_auto"].update(algorithm=kept, chose="bf16")
    (latest / META).write_text(json.dumps(meta))

    second, used = _attempt_counting_wires(tmp_path, max_steps=4, attempt=2)
    assert _started(second)["resumed_from_step"] == 2
    [event] = _auto_events(second)
    assert event.startswith("kept bf16, the choice the checkpoint of step 2"), event
    assert _chosen_wire(event) == kept
    assert used == [{kept: 2}] * 2, used  # steps 3 and 4, one bucket each, on both ranks


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


def test_a_restart_without_a_checkpoint_to_continue_measures(tmp_path: Path) -> None:
    [event] = _auto_events(_attempt(tmp_path, 2, max_steps=4, attempt=2))
    assert event.startswith("auto AllReduce measured on")
    assert event.endswith("measured again: no checkpoint of an earlier attempt carries its choice")
