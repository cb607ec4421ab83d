"""CUDA checks: NCCL compress hooks, fp16 with GradScaler, `auto` precision, a full Trainer
run. Marked `gpu`: skipped where no CUDA device exists. Self-contained (no service
fixtures), so it also runs with `pytest --noconftest` on a bare GPU host."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ampfleet.workers.rundir import RecordReader
from ampfleet.workers.training.allreduce import AllReduceState, attach
from ampfleet.workers.training.precision import resolve_allreduce_dtype, resolve_precision
from tests.support.cuda import digits_trainer, nccl

pytestmark = pytest.mark.gpu
__all__ = ["nccl"]  # the fixture: one NCCL rank on the first GPU


def test_auto_precision_on_this_gpu(nccl: torch.device) -> None:
    major, _ = torch.cuda.get_device_capability(nccl)
    expected = "bf16" if major >= 8 else "fp16"
    assert resolve_precision("auto", nccl) == expected
    assert resolve_allreduce_dtype("auto", expected, "nccl") == expected


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nccl_builtin_compress_hooks_with_guard(nccl: torch.device, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(nccl)
    reference = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(nccl)
    reference.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model, device_ids=[0])
    state = AllReduceState(dtype=dtype, backend="nccl", guard_every=1, guard_threshold=1e-2)
    attach(ddp, state)
    batch = torch.randn(64, 512, device=nccl)
    state.begin_step(0)
    ddp(batch).pow(2).mean().backward()
    reference(batch).pow(2).mean().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    expected = torch.cat([p.grad.flatten() for p in reference.parameters()])
    error = float((grads - expected).norm() / expected.norm())
    assert error <= 2.0**-8
    assert state.last_relative_error is not None
    assert state.last_relative_error <= 2.0**-8
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert state.bytes_this_step * 2 == fp32_bytes


@pytest.mark.parametrize("precision", ["fp16", "bf16", "auto"])
def test_trainer_on_cuda_reaches_accuracy(
    nccl: torch.device, precision: str, tmp_path: Path
) -> None:
    trainer = digits_trainer(nccl, precision, tmp_path, steps=200)
    result = trainer.run()
    trainer.writer.close()  # type: ignore[union-attr]
    assert result["val_accuracy"] >= 0.9
    records = RecordReader(tmp_path / "events.jsonl").read_new()
    metrics = [r["values"] for r in records if r["kind"] == "metrics" and "loss" in r["values"]]
    assert {"time_forward_s", "time_backward_s", "time_optimizer_s", "allreduce_bytes"} <= set(
        metrics[-1]
    )
    if trainer.precision == "fp16":
        assert metrics[-1]["loss_scale"] > 0


def test_fp16_grad_scaler_skips_an_inf_step_on_cuda(nccl: torch.device, tmp_path: Path) -> None:
    trainer = digits_trainer(nccl, "fp16", tmp_path, steps=8)
    inner = trainer.task.loss
    calls = {"n": 0}

    def rigged(model: nn.Module, batch: object) -> torch.Tensor:
        calls["n"] += 1
        loss = inner(model, batch)
        return loss * float("inf") if calls["n"] == 4 else loss

    trainer.task.loss = rigged
    trainer.run()
    trainer.writer.close()  # type: ignore[union-attr]
    records = RecordReader(tmp_path / "events.jsonl").read_new()
    by_step = {
        r["step"]: r["values"] for r in records if r["kind"] == "metrics" and "loss" in r["values"]
    }
    assert by_step[3]["skipped_steps"] == 0
    assert by_step[4]["skipped_steps"] == 1
    assert by_step[4]["loss_scale"] == by_step[3]["loss_scale"] / 2
