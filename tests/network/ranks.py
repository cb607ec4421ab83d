"""Functions run on gloo ranks, either all on this host (localranks.run_ranks) or one per
host of a network bed (bedranks.run_on_bed), so that a test can compare the two."""

from __future__ import annotations

import torch

from ampfleet.workers.training.allreduce import AllReduceState
from ampfleet.workers.training.allreduce_auto import DDP_BUCKET_ELEMENTS, measure_auto
from ampfleet.workers.training.ring import PairDirections, Workspace, wire_average_

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _directions(world_size: int) -> PairDirections | None:
    return PairDirections() if world_size == 2 else None  # as attach() sets up


def reduced(rank: int, world_size: int, numel: int) -> dict[str, torch.Tensor]:
    """Seeded gradients averaged through each half-precision wire."""
    directions = _directions(world_size)
    results = {}
    for name, dtype in HALF.items():
        values = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
        results[name] = wire_average_(values, dtype, Workspace(), 0, directions)
    return results


def auto_choice(rank: int, world_size: int) -> dict[str, str]:
    state = AllReduceState(dtype=torch.bfloat16, backend="gloo")
    state.directions = _directions(world_size)
    choice = measure_auto(state, "bf16", DDP_BUCKET_ELEMENTS, torch.device("cpu"))
    return {"dtype": choice.dtype, "described": choice.describe()}
