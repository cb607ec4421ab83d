"""Our compressed AllReduce hooks on real gloo ranks, against an fp32 reduction.

bf16 carries 8 significant bits: rounding each rank's contribution and then the sum costs
about 2e-3 of relative error (L2) on Gaussian-like gradients whatever the implementation.
So the bar here is twofold: the hook adds nothing beyond its wire format's own rounding
(compared with an exact simulation of that format), and stays under the format's unit
roundoff (2^-8 for bf16; fp16, with 11 bits, must stay under 5e-4).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ampfleet.workers.training.allreduce import AllReduceState, attach
from ampfleet.workers.training.localranks import run_ranks

UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 5e-4}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 256))


def _batch(rank: int) -> torch.Tensor:
    return torch.randn(64, 256, generator=torch.Generator().manual_seed(100 + rank))


def _flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _run(rank: int, world_size: int, dtype_name: str, threshold: float):
    local = _model()
    local(_batch(rank)).pow(2).mean().backward()
    model = _model()
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    state = AllReduceState(
        dtype=DTYPES[dtype_name], backend="gloo", guard_every=1, guard_threshold=threshold
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
        simulated = (wire[0].float() + wire[1].float()).to(dtype).float()
        for result in ranks:
            error = _relative(result["reduced"], reference)
            assert error <= UNIT_ROUNDOFF[name], (name, error)
            assert error <= _relative(simulated, reference) * 1.001 + 1e-9, (name, error)
            assert result["bytes"] * 2 == fp32[0]["bytes"]
            assert result["switch"] is None
        # Every rank holds the same reduced gradients and measured the same guard error.
        assert torch.equal(ranks[0]["reduced"], ranks[1]["reduced"])
        assert ranks[0]["guard_error"] == ranks[1]["guard_error"] is not None


def test_guard_switches_to_fp32_past_the_threshold() -> None:
    for result in run_ranks(_run, 2, "bf16", 1e-6):
        assert result["guard_error"] > 1e-6
        assert "switched to fp32" in result["switch"]


def _ring_sum(rank: int, world_size: int, numel: int):
    from ampfleet.workers.training.ring import Workspace, ring_average_

    values = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    averaged = ring_average_(values.clone(), torch.bfloat16, Workspace())
    return values, averaged


def test_ring_is_exact_for_odd_world_sizes_and_uneven_chunks() -> None:
    """Three ranks and a length that does not split evenly: every rank ends with the very
    same average, within bf16's error of the exact one (one rounding of each input and one
    of each partial sum along the ring)."""
    numel = 3 * 4096 * 5 + 7
    ranks = run_ranks(_ring_sum, 3, numel)
    for rank, (_, averaged) in enumerate(ranks):
        assert torch.equal(averaged, ranks[0][1]), rank
    exact = sum(values for values, _ in ranks) / 3
    error = float((ranks[0][1] - exact).norm() / exact.norm())
    assert error <= 2.0**-7
