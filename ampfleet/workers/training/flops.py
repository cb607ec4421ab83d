"""How much of its hardware a job uses: FLOPs per step against the device's peak (MFU).

A step's time says how fast a job runs, not how fast it could: MFU (model FLOPs
utilisation) is the FLOPs the model needs per step over what the device could have done in
that time. The FLOPs are counted once, with torch's FlopCounterMode over the first
micro-step's forward and backward (so a recipe declares nothing); the count depends on
shapes only, not on the dtype. The peak comes from a table of dense tensor-core
figures per GPU and dtype (vendor datasheets, no sparsity), and on a CPU from a matmul
probe measured at start in the job's dtype, since CPUs have no datasheet figure that holds
under a shared node's thread budget.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

TFLOP = 1e12
# Dense peak FLOP/s per device and compute dtype, from the vendors' datasheets (SXM parts
# where there are several). fp32 is the non-tensor-core rate: autocast leaves fp32 jobs
# there unless TF32 is enabled.
GPU_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
    "L4": {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3},
    "A10": {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}
PROBE_SIZES = (128, 256, 512)
PROBE_REPEATS = 5
PROBE_BUDGET_S = 0.1
"""The CPU probe runs before the first step, on the start's critical path, so it goes up the
sizes only while the next one fits this budget: a CPU without native half-precision matmul
(no AVX512-BF16 or AMX) runs a 512 bf16 matmul through emulated kernels at about 1 GFLOP/s,
and six of them took 1.9 s of every rank's start. On such a CPU the probe stops at 128 or
256, where the emulated kernels, on matrices that stay in cache, measured 1.6-3 GFLOP/s:
a higher peak than the 512 one, so an MFU on the low side, never flattered."""


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    source: str
    """Where the figure comes from: the table's row, or the CPU probe."""


class StepFlops:
    """FLOPs of one optimizer step on one rank, counted over the first micro-step this
    process runs (forward and backward), times the micro-steps per step.

    Counting the real micro-step, not an extra one, leaves no trace: no RNG drawn, no
    batch-norm statistics moved, no batch taken from the loader, no loss call a test
    counts. Only that step pays the counter's overhead."""

    def __init__(self, grad_accum_steps: int) -> None:
        self.grad_accum_steps = grad_accum_steps
        self.per_step: int | None = None

    @contextlib.contextmanager
    def counting(self, micro: int) -> Iterator[None]:
        if micro != 0 or self.per_step is not None:
            yield
            return
        # Eager for the counted micro-step: a frame that torch.compile meets under a
        # dispatch mode (the counter is one) is marked never to compile, and `compile:
        # true` would silently run eager for the whole job.
        with torch.compiler.set_stance("force_eager"), FlopCounterMode(display=False) as counter:
            yield
        self.per_step = int(counter.get_total_flops()) * self.grad_accum_steps

    def message(self, peak: Peak | None, where: str) -> str:
        per_step = self.per_step or 0
        figure = (
            f"peak {peak.flops_per_s / TFLOP:,.3f} TFLOP/s per rank ({peak.source})"
            if peak is not None
            else f"no peak figure for {where}, so no MFU"
        )
        return f"{per_step / 1e9:,.3f} GFLOP per optimizer step on each rank; {figure}"


def peak_flops(device: torch.device, precision: str) -> Peak | None:
    """The device's dense peak in the compute dtype; None for a GPU the table lacks."""
    if device.type == "cuda":
        return table_peak(torch.cuda.get_device_name(device), precision)
    return Peak(probe_matmul_flops(precision), f"CPU {precision} matmul probe")


def table_peak(device_name: str, precision: str) -> Peak | None:
    """The table's row for a device name as CUDA reports it ("NVIDIA H100 80GB HBM3"); the
    longer model names come first in the table, so "A100" is never read as "A10"."""
    for model, peaks in GPU_PEAK_TFLOPS.items():
        if model in device_name.upper() and precision in peaks:
            return Peak(peaks[precision] * TFLOP, f"{model} {precision} datasheet")
    return None


def probe_matmul_flops(precision: str) -> float:
    """The best FLOP/s of a square matmul in the dtype, on this rank's threads, within
    `PROBE_BUDGET_S`."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    generator = torch.Generator().manual_seed(0)

    @functools.cache  # one matrix per size, made once: only the matmul is on the clock
    def matrix(size: int) -> torch.Tensor:
        return torch.randn(size, size, generator=generator).to(dtype)

    def matmul_seconds(size: int) -> float:
        a = matrix(size)
        started = time.perf_counter()
        torch.mm(a, a)
        return time.perf_counter() - started

    return probe_rate(matmul_seconds, PROBE_SIZES, PROBE_REPEATS, PROBE_BUDGET_S)


def probe_rate(
    matmul_seconds: Callable[[int], float],
    sizes: tuple[int, ...],
    repeats: int,
    budget_s: float,
) -> float:
    """The best rate of `matmul_seconds(size)` (one square matmul, timed) over `sizes` in
    order, each timed up to `repeats` times after a first call that picks the kernels; the
    next size is tried only if its first call and one more, predicted from this size's best
    time (a matmul's work grows with the cube of its size), fit what is left of `budget_s`.
    The smallest size is always measured."""
    spent = 0.0
    best_rate = 0.0
    for index, size in enumerate(sizes):
        spent += matmul_seconds(size)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            if best < float("inf") and spent + best > budget_s:
                break
            seconds = matmul_seconds(size)
            spent += seconds
            best = min(best, seconds)
        best_rate = max(best_rate, 2 * size**3 / max(best, 1e-9))
        if index + 1 < len(sizes):
            predicted = best * (sizes[index + 1] / size) ** 3
            if spent + 2 * predicted > budget_s:
                break
    return best_rate


def utilisation(
    step_flops: int, world_size: int, step_time_s: float, peak: Peak | None
) -> dict[str, float]:
    """A step's achieved FLOP/s (every rank together) and, with a peak, its MFU (0..1):
    what the ranks did over what their devices could have done in the step's time."""
    achieved = step_flops * world_size / step_time_s if step_time_s > 0 else 0.0
    metrics = {"flops_per_s": achieved}
    if peak is not None and peak.flops_per_s > 0:
        metrics["mfu"] = achieved / (peak.flops_per_s * world_size)
    return metrics
