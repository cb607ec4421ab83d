"""Mixed precision must not cost accuracy: bf16 and fp16 runs (with matching half-precision
AllReduce) against fp32, same seeds, two gloo ranks."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.support.localranks import run_ranks
from tests.support.training import SMALL_CHARLM, train_recipe


def _entry(rank: int, world_size: int, out: str, kwargs: dict):
    return train_recipe(rank, world_size, out, **kwargs)


def _final(tmp_path: Path, precision: str, **kwargs) -> dict:
    out = tmp_path / precision
    allreduce = "fp32" if precision == "fp32" else precision
    results = run_ranks(
        partial(
            _entry,
            out=str(out),
            kwargs={"precision": precision, "allreduce_dtype": allreduce, **kwargs},
        ),
        2,
    )
    evaluations = [{k: v for k, v in r.items() if k.startswith("val_")} for r in results]
    assert evaluations[0] == evaluations[1]  # every rank ends with the same evaluation
    return evaluations[0]


def test_digits_accuracy_within_one_point_of_fp32(tmp_path: Path) -> None:
    runs = {p: _final(tmp_path, p, max_steps=200) for p in ("fp32", "bf16", "fp16")}
    assert runs["fp32"]["val_accuracy"] >= 0.9
    for precision in ("bf16", "fp16"):
        gap = abs(runs[precision]["val_accuracy"] - runs["fp32"]["val_accuracy"])
        assert gap <= 0.01, (precision, runs[precision]["val_accuracy"], runs["fp32"])


@pytest.mark.slow  # three minutes on two cores; digits' test covers the same path in make test
def test_charlm_loss_within_two_percent_of_fp32(tmp_path: Path) -> None:
    runs = {
        p: _final(tmp_path, p, recipe="charlm", max_steps=150, hyperparameters=SMALL_CHARLM)
        for p in ("fp32", "bf16", "fp16")
    }
    reference = runs["fp32"]["val_loss"]
    assert reference < 3.0  # it learned something: uniform over 256 bytes is 5.5
    for precision in ("bf16", "fp16"):
        assert abs(runs[precision]["val_loss"] - reference) / reference <= 0.02, runs
        assert runs[precision]["val_bits_per_char"] > 0
