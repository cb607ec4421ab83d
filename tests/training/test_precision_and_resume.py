"""Loss scaling, precision fallback and checkpoint resume on real gloo ranks."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from ampfleet.workers.training.precision import next_precision
from tests.support.localranks import RankFailedError, run_ranks
from tests.support.training import dump, losses, records, train_recipe


def _ranks(out: Path, **kwargs) -> list:
    return run_ranks(partial(_entry, out=str(out), kwargs=kwargs), 2)


def _entry(rank: int, world_size: int, out: str, kwargs: dict):
    return train_recipe(rank, world_size, out, **kwargs)


def test_grad_scaler_skips_a_step_with_an_injected_inf(tmp_path: Path) -> None:
    _ranks(tmp_path, precision="fp16", max_steps=12, inf_calls=(5, 6))
    metrics = [r for r in records(tmp_path) if r["kind"] == "metrics" and "loss" in r["values"]]
    by_step = {r["step"]: r["values"] for r in metrics}
    assert by_step[5]["skipped_steps"] == 0
    assert by_step[6]["skipped_steps"] == 1  # step 6 ran loss call 5
    assert by_step[6]["loss_scale"] == by_step[5]["loss_scale"] / 2
    assert by_step[12]["skipped_steps"] == 1
    assert torch.isfinite(torch.tensor(by_step[12]["loss"]))


def test_auto_falls_back_from_fp16_on_repeated_overflow(tmp_path: Path) -> None:
    # `auto` resolves to fp16 on pre-Ampere GPUs; start there as such a GPU would.
    _ranks(
        tmp_path,
        precision="fp16",
        requested_precision="auto",
        max_steps=40,
        checkpoint_every=5,
        inf_calls=(8, 30),
    )
    events = [r for r in records(tmp_path) if r["kind"] == "event"]
    assert [e["reason"] for e in events] == ["precision_fallback"], dump(events)
    # bf16 next where the CPU has native bf16 (AVX512-BF16, AMX), else straight to fp32.
    target = next_precision("fp16", torch.device("cpu"))
    assert events[0]["message"].startswith(f"fp16 -> {target}")
    assert "resumed from the checkpoint at step 5" in events[0]["message"]
    setups = [r for r in records(tmp_path) if r["kind"] == "setup"]
    assert setups[-1]["precision"] == target
    final = losses(tmp_path)
    assert max(final) == 40
    assert final[40] < final[1]
    # Goodput's accounting: the steps after the checkpoint it went back to were recomputed.
    usage = [r for r in records(tmp_path) if r["kind"] == "usage"][-1]
    assert (usage["step"], usage["resumed_from_step"]) == (40, 0)
    assert usage["recomputed_s"] > 0
    assert usage["step_s"] > 0
    assert usage["checkpoint_s"] > 0
    saved = [step for step, _ in usage["marks"]]
    assert saved == sorted(set(saved))
    assert saved[-1] == 40


def test_explicit_fp16_that_keeps_overflowing_fails_with_advice(tmp_path: Path) -> None:
    with pytest.raises(RankFailedError, match="use precision 'auto' or 'bf16'"):
        _ranks(tmp_path, precision="fp16", max_steps=40, inf_calls=(3, 40))


def test_resume_continues_the_same_loss_sequence(tmp_path: Path) -> None:
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    settings = {
        "precision": "bf16",
        "allreduce_dtype": "bf16",
        "max_steps": 30,
        "checkpoint_every": 10,
    }
    _ranks(straight, **settings)
    with pytest.raises(RankFailedError, match="injected crash"):
        _ranks(crashed, **settings, crash_call=25)
    _ranks(crashed, **settings)
    started = [r for r in records(crashed) if r["kind"] == "started"]
    assert [s["resumed_from_step"] for s in started] == [0, 20]
    usage = [r for r in records(crashed) if r["kind"] == "usage"]
    first, second = [u for u in usage if u["resumed_from_step"] == 0], usage[-1]
    assert 20 <= first[-1]["step"] < 30
    assert [m[0] for m in first[-1]["marks"]] == [10, 20]
    assert (second["resumed_from_step"], second["step"]) == (20, 30)
    assert second["first_step_at"] > first[-1]["first_step_at"]
    expected, resumed = losses(straight), losses(crashed)
    assert [resumed[s] for s in range(21, 31)] == [expected[s] for s in range(21, 31)]
