"""A runtime-only run (stop.max_runtime_s alone) on real gloo ranks: it trains until its time
is up, then ends as a step-bounded run does (final evaluation, checkpoint), with its
learning rate decayed over the time; rank 0's step lines keep their `step N/T loss` prefix,
with `?` for the total it does not have and the loss in significant digits."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ampfleet.workers.training import checkpoint
from tests.support.localranks import run_ranks
from tests.support.training import records, train_recipe

STEP_LINE = re.compile(r"^step (\d+)/\? loss (\S+) ", re.MULTILINE)


def _entry(rank: int, world_size: int, out: str) -> dict[str, Any]:
    return train_recipe(
        rank, world_size, out, precision="fp32", max_steps=None, runtime_s=4.0, eval_every=0
    )


def test_a_runtime_only_run_trains_until_its_time_is_up_then_finishes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    final = run_ranks(partial(_entry, out=str(tmp_path)), 2)
    written = records(tmp_path)
    (started,) = [r for r in written if r["kind"] == "started"]
    assert started["total_steps"] is None
    events = [r for r in written if r["kind"] == "event"]
    assert [e["reason"] for e in events] == ["runtime_reached"]
    steps = [r["step"] for r in written if r["kind"] == "progress"]
    last = steps[-1]
    assert last > 10  # several stop checks came and went before the time was up
    assert last % 10 == 0  # the ranks stopped together, at a stop check
    # As after max_steps: the final evaluation, and a checkpoint of the last step.
    assert final[0]["val_accuracy"] == final[1]["val_accuracy"]  # summed over every rank
    evaluated = [r for r in written if r["kind"] == "metrics" and "val_accuracy" in r["values"]]
    assert [r["step"] for r in evaluated] == [last]
    latest = checkpoint.latest(tmp_path / "checkpoints")
    assert latest is not None
    assert checkpoint.read_meta(latest)["step"] == last
    # The rate decays over the time, from its base after warmup towards 10% of it.
    rates = [r["values"].get("learning_rate") for r in written if r["kind"] == "metrics"]
    rates = [rate for rate in rates[10:] if rate is not None]  # after digits' 10 of warmup
    assert rates[-1] < rates[0]
    assert rates == sorted(rates, reverse=True)
    lines = STEP_LINE.findall(capfd.readouterr().out)
    assert [int(step) for step, _ in lines] == steps
    assert all(loss == format(float(loss), ".4g") for _, loss in lines)
