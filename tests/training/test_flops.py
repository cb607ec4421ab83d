"""FLOPs per step, the peak they are compared with, and MFU (training/flops.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ampfleet.workers.training.flops import (
    PROBE_BUDGET_S,
    PROBE_REPEATS,
    PROBE_SIZES,
    Peak,
    StepFlops,
    peak_flops,
    probe_matmul_flops,
    probe_rate,
    table_peak,
    utilisation,
)
from ampfleet.workers.training.task import TrainingTask
from tests.support.localranks import run_ranks
from tests.support.training import records, train_recipe

BATCH, IN, HIDDEN, OUT, ACCUM = 16, 64, 48, 10, 2


def _mlp_task() -> TrainingTask:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))
    data = TensorDataset(torch.randn(64, IN), torch.randint(0, OUT, (64,)))

    def loss(module: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(module(batch[0]), batch[1])

    return TrainingTask(
        model=model,
        train_dataset=data,
        val_dataset=None,
        loss=loss,
        eval_step=lambda _m, _b: {},
        eval_finalize=dict,
        batch_size=BATCH,
        learning_rate=1e-3,
        grad_accum_steps=ACCUM,
    )


def test_mlp_flops_equal_the_analytic_count() -> None:
    task = _mlp_task()
    flops = StepFlops(grad_accum_steps=ACCUM)
    data, labels = next(iter(DataLoader(task.train_dataset, batch_size=BATCH)))
    for micro in range(ACCUM):  # only the first micro-step is counted
        with flops.counting(micro):
            task.loss(task.model, (data, labels)).backward()
    # Forward: 2 FLOPs per multiply-add of each Linear. Backward: the weight gradient of
    # both layers, and the input gradient of the second only (the data needs none).
    forward = 2 * BATCH * (IN * HIDDEN + HIDDEN * OUT)
    backward = 2 * BATCH * IN * HIDDEN + 2 * (2 * BATCH * HIDDEN * OUT)
    assert flops.per_step == ACCUM * (forward + backward)
    assert flops.message(None, "cpu in fp32").endswith("no peak figure for cpu in fp32, so no MFU")


def test_cpu_peak_is_a_probe_in_each_dtype() -> None:
    for precision in ("fp32", "bf16"):
        peak = peak_flops(torch.device("cpu"), precision)
        assert peak is not None
        assert peak.flops_per_s > 0
        assert peak.source == f"CPU {precision} matmul probe"
    assert probe_matmul_flops("fp32") > 0


@pytest.mark.parametrize(
    ("name", "precision", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.0),
        ("NVIDIA H200", "fp16", 989.0),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A10G", "bf16", 125.0),
        ("NVIDIA L40S", "fp32", 91.6),
        ("NVIDIA L4", "bf16", 121.0),
        ("Tesla V100-SXM2-16GB", "fp16", 125.0),
        ("Tesla T4", "fp32", 8.1),
    ],
)
def test_gpu_peaks_come_from_the_table(name: str, precision: str, tflops: float) -> None:
    peak = table_peak(name, precision)
    assert peak is not None
    assert peak.flops_per_s == tflops * 1e12


def test_no_peak_for_a_gpu_or_dtype_the_table_lacks() -> None:
    assert table_peak("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 on Volta
    assert table_peak("Some Future GPU", "bf16") is None


def test_mfu_is_achieved_over_peak_of_every_rank() -> None:
    peak = Peak(flops_per_s=100.0, source="test")
    metrics = utilisation(step_flops=50, world_size=2, step_time_s=1.0, peak=peak)
    assert metrics == {"flops_per_s": 100.0, "mfu": 0.5}
    assert utilisation(50, 2, 1.0, None) == {"flops_per_s": 100.0}


def _entry(rank: int, world_size: int, out: str) -> dict[str, Any]:
    return train_recipe(rank, world_size, out, precision="bf16", max_steps=4)


def test_a_job_reports_its_flops_and_mfu_per_step(tmp_path: Path) -> None:
    run_ranks(partial(_entry, out=str(tmp_path)), 2)
    compute = [r for r in records(tmp_path) if r["kind"] == "compute"]
    assert len(compute) == 1
    assert compute[0]["step_flops"] > 0
    assert "CPU bf16 matmul probe" in compute[0]["message"]
    steps = [
        r["values"] for r in records(tmp_path) if r["kind"] == "metrics" and "loss" in r["values"]
    ]
    assert len(steps) == 4
    assert all(v["flops_per_s"] > 0 and v["mfu"] > 0 for v in steps)
    # Each rank's compute time, for the slow-rank rule of the diagnosis.
    assert all(v["compute_s_rank0"] > 0 and v["compute_s_rank1"] > 0 for v in steps)


def _costs(flops_per_s: float, seen: list[int]) -> Callable[[int], float]:
    """A matmul of a square size at a fixed rate, noting each size it is asked for."""

    def matmul_seconds(size: int) -> float:
        seen.append(size)
        return 2 * size**3 / flops_per_s

    return matmul_seconds


def test_the_cpu_probe_stops_below_a_size_that_would_not_fit_its_budget() -> None:
    # An emulated bf16 matmul, about 1 GFLOP/s: a 512 one alone takes 0.27 s, so the probe
    # must not reach it (six of them were 1.9 s of each rank's start).
    seen: list[int] = []
    rate = probe_rate(_costs(1e9, seen), PROBE_SIZES, PROBE_REPEATS, PROBE_BUDGET_S)
    assert 512 not in seen
    assert seen[0] == 128
    assert rate == pytest.approx(1e9)
    assert sum(2 * size**3 / 1e9 for size in seen) <= PROBE_BUDGET_S


def test_a_fast_cpu_is_probed_up_to_the_largest_size() -> None:
    seen: list[int] = []
    rate = probe_rate(_costs(1e11, seen), PROBE_SIZES, PROBE_REPEATS, PROBE_BUDGET_S)
    assert seen.count(512) == 1 + PROBE_REPEATS  # the warm-up and every repeat
    assert rate == pytest.approx(1e11)


def test_a_kernel_too_slow_for_the_budget_is_still_measured_once_at_the_smallest_size() -> None:
    seen: list[int] = []
    rate = probe_rate(_costs(1e6, seen), PROBE_SIZES, PROBE_REPEATS, PROBE_BUDGET_S)
    assert seen == [128, 128]  # the warm-up, one timed call, and nothing larger
    assert rate == pytest.approx(1e6)
