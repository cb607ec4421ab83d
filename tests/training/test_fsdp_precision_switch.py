"""FSDP2 has no public way to change a unit's mixed-precision policy after `fully_shard`;
ParallelModel.set_dtypes (a precision fallback, the guard's switch to fp32 reduction) goes
through parallel.replace_mixed_precision, which writes torch's private state. If a torch
upgrade moves that state, this test fails: the step after the switch must gather and
reduce-scatter in the new dtypes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ampfleet.workers.training.allreduce import AllReduceState
from ampfleet.workers.training.parallel import ParallelConfig, ParallelModel
from tests.support.localranks import run_ranks


def _one_step(parallel: ParallelModel, comm: AllReduceState, step: int) -> dict[str, Any]:
    """One forward and backward: the dtype each block computed with, the bytes sent."""
    seen: list[torch.dtype] = []
    # A pre-hook registered after FSDP's own runs once the block's weights are gathered.
    hooks = [
        block.register_forward_pre_hook(lambda module, _args: seen.append(module.weight.dtype))
        for block in parallel.model
    ]
    comm.begin_step(step)
    parallel.module(torch.randn(4, 32)).sum().backward()
    for hook in hooks:
        hook.remove()
    return {"gathered": sorted({str(d) for d in seen}), "bytes": comm.bytes_this_step}


def _switch(rank: int, world_size: int) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
    comm = AllReduceState(dtype=torch.bfloat16, backend="gloo", guard_every=0)
    parallel = ParallelModel(
        model,
        "fsdp",
        blocks=list(model),
        cfg=ParallelConfig("fsdp"),
        precision="bf16",
        comm=comm,
        device=torch.device("cpu"),
    )
    before = _one_step(parallel, comm, 0)
    comm.dtype = torch.float32
    parallel.set_dtypes("fp32", torch.float32)
    return [before, _one_step(parallel, comm, 1)]


def test_set_dtypes_changes_what_fsdp_gathers_and_reduces_in() -> None:
    for before, after in run_ranks(_switch, 2):
        assert before["gathered"] == ["torch.bfloat16"]
        assert after["gathered"] == ["torch.float32"]
        # The same gradients reduce-scattered: 2 bytes an element, then 4.
        assert before["bytes"] > 0
        assert after["bytes"] == 2 * before["bytes"]
