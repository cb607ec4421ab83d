"""A recipe may bring its own optimizer and learning-rate schedule; the loop steps it under
the job's precision and sharding, and its checkpoints resume it."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint import FileSystemReader

from tests.support.localranks import RankFailedError, run_ranks
from tests.support.training import records, train_recipe

BASE_LR = 0.05


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=BASE_LR, momentum=0.9)


def linear_decay(step: int, done: float) -> float:
    return 1.0 - done


def _entry(rank: int, world_size: int, out: str, **kwargs: object) -> dict[str, float]:
    options = {"make_optimizer": sgd, "lr_schedule": linear_decay}
    return train_recipe(rank, world_size, out, precision="fp32", task_options=options, **kwargs)


def _learning_rates(out: Path) -> dict[int, float]:
    return {
        r["step"]: r["values"]["learning_rate"]
        for r in records(out)
        if r["kind"] == "metrics" and "learning_rate" in r["values"]
    }


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_recipes_optimizer_and_schedule_drive_the_loop(tmp_path: Path, strategy: str) -> None:
    run_ranks(partial(_entry, out=str(tmp_path), max_steps=8, strategy=strategy), 2)
    rates = _learning_rates(tmp_path)
    # Step n (1-based) ran with the schedule's factor at step n - 1 of 8.
    assert rates == pytest.approx({n: BASE_LR * (1 - (n - 1) / 8) for n in range(1, 9)})
    losses = [r["values"]["loss"] for r in records(tmp_path) if r["kind"] == "metrics"
              and "loss" in r["values"]]  # fmt: skip
    assert losses[-1] < losses[0]


def test_a_resumed_run_continues_the_recipes_optimizer_and_schedule(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    common = {"max_steps": 8, "checkpoint_every": 4, "checkpoint_dir": str(tmp_path / "ckpt")}
    with pytest.raises(RankFailedError):  # loss call 5 is step 6: after the checkpoint of 4
        run_ranks(partial(_entry, out=str(first), crash_call=5, **common), 2)
    run_ranks(partial(_entry, out=str(second), **common), 2)
    rates = _learning_rates(second)
    assert sorted(rates) == [5, 6, 7, 8]
    assert rates == pytest.approx({n: BASE_LR * (1 - (n - 1) / 8) for n in range(5, 9)})
    # What the checkpoints hold is the recipe's optimizer's state: SGD's momentum.
    saved = FileSystemReader(tmp_path / "ckpt" / "ckpt-000000008").read_metadata()
    names = list(saved.state_dict_metadata)
    assert any(name.endswith("momentum_buffer") for name in names)
    assert not any(name.endswith("exp_avg") for name in names)
