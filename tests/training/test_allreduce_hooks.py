"""Our compressed AllReduce hooks on real gloo ranks, against an fp32 reduction.

Two ranks swap their rounded contributions and add them in fp32, so the result must be
bit-identical to an exact simulation of that wire format, and its relative error (L2)
within 2e-3 of the fp32 reduction. bf16 carries 8 significant bits: the one rounding of
each contribution costs about 1.6e-3; a ring, which also rounds the sum, about 2.4e-3.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ampfleet.workers.training.allreduce import AllReduceState, attach
from tests.support.localranks import run_ranks

MAX_RELATIVE_ERROR = 2e-3
RING_RELATIVE_ERROR = 3e-3
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 256))


def _batch(rank: int) -> torch.Tensor:
    return torch.randn(64, 256, generator=torch.Generator().manual_seed(100 + rank))


def _flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _run(
    rank: int, world_size: int, dtype_name: str, threshold: float, algorithm: str | None = None
):
    local = _model()
    local(_batch(rank)).pow(2).mean().backward()
    model = _model()
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    state = AllReduceState(
        dtype=DTYPES[dtype_name],
        backend="gloo",
        guard_every=1,
        guard_threshold=threshold,
        algorithm=algorithm,
    )
    attach(ddp, state)
    state.begin_step(0)
    ddp(_batch(rank)).pow(2).mean().backward()
    state.close()
    return {
        "local": _flat_grads(local),
        "reduced": _flat_grads(model),
        "bytes": state.bytes_this_step,
        "guard_error": state.last_relative_error,
        "switch": state.switch_reason,
    }


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_half_precision_hooks_match_fp32_and_add_no_error_of_their_own() -> None:
    fp32 = run_ranks(_run, 2, "fp32", 1.0)
    reference = (fp32[0]["local"] + fp32[1]["local"]) / 2
    assert _relative(fp32[0]["reduced"], reference) < 1e-6
    for name in ("bf16", "fp16"):
        ranks = run_ranks(_run, 2, name, 1.0)
        dtype = DTYPES[name]
        wire = [(r["local"] / 2).to(dtype) for r in ranks]
        simulated = wire[0].float() + wire[1].float()
        for result in ranks:
            assert torch.equal(result["reduced"], simulated), name
            error = _relative(result["reduced"], reference)
            assert error <= MAX_RELATIVE_ERROR, (name, error)
            assert result["bytes"] * 2 == fp32[0]["bytes"]
            assert result["switch"] is None
        # Every rank holds the same reduced gradients and measured the same guard error.
        assert torch.equal(ranks[0]["reduced"], ranks[1]["reduced"])
        assert ranks[0]["guard_error"] == ranks[1]["guard_error"] is not None


def test_guard_switches_to_fp32_past_the_threshold() -> None:
    for result in run_ranks(_run, 2, "bf16", 1e-6):
        assert result["guard_error"] > 1e-6
        assert "switched to fp32" in result["switch"]


def _wire_average(
    rank: int, world_size: int, numel: int, dtype: torch.dtype, bound: float | None = None
):
    from ampfleet.workers.training.ring import Workspace, wire_average_

    values = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    if bound is not None:
        values = values.clamp(-1.0, 1.0) * bound
    averaged = wire_average_(values.clone(), dtype, Workspace())
    return values, averaged


def test_ring_is_exact_for_odd_world_sizes_and_uneven_chunks() -> None:
    """Three ranks and a length that does not split evenly: every rank ends with the very
    same average, within bf16's error of the exact one (one rounding of each input and one
    of each partial sum along the ring)."""
    numel = 3 * 4096 * 5 + 7
    ranks = run_ranks(_wire_average, 3, numel, torch.bfloat16)
    for rank, (_, averaged) in enumerate(ranks):
        assert torch.equal(averaged, ranks[0][1]), rank
    exact = sum(values for values, _ in ranks) / 3
    error = float((ranks[0][1] - exact).norm() / exact.norm())
    assert error <= 2.0**-7


def test_fp16_wire_carries_contributions_past_its_range_once_divided() -> None:
    """Gradients up to twice fp16's largest finite value (65504) still average to finite
    values on two ranks: each contribution is halved in fp32 before the cast."""
    ranks = run_ranks(_wire_average, 2, 2 * 4096 * 3, torch.float16, 2 * 65504 * 0.99)
    exact = (ranks[0][0] + ranks[1][0]) / 2
    assert max(float(values.abs().max()) for values, _ in ranks) > 65504
    for _, averaged in ranks:
        assert torch.isfinite(averaged).all()
        assert float((averaged - exact).norm() / exact.norm()) <= MAX_RELATIVE_ERROR


@pytest.mark.parametrize("algorithm", ["swap", "ring", "gloo"])
def test_each_wire_auto_may_choose_averages_alike_on_every_rank(algorithm: str) -> None:
    """`auto` picks among the wires by speed (the swap, the ring, gloo's own): each gives
    every rank the same gradients, within the ring's error bar (it rounds the sum too)."""
    ranks = run_ranks(_run, 2, "bf16", 1.0, algorithm)
    reference = (ranks[0]["local"] + ranks[1]["local"]) / 2
    assert torch.equal(ranks[0]["reduced"], ranks[1]["reduced"])
    error = _relative(ranks[0]["reduced"], reference)
    assert 0 < error <= RING_RELATIVE_ERROR, error  # 0: it never went through the wire
    assert ranks[0]["guard_error"] == ranks[1]["guard_error"] is not None
