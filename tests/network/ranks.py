"""Functions run on gloo ranks, either all on this host (localranks.run_ranks) or one per
host of a network bed (`on_bed`), so that a test can compare the two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.workers.training.allreduce import (
    DDP_BUCKET_ELEMENTS,
    AllReduceState,
    measure_auto,
)
from ampfleet.workers.training.ring import PairDirections, Workspace, wire_average_
from tests.support.netbed import NetworkBed

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


FUNCTIONS = {"reduced": reduced, "auto_choice": auto_choice}


def on_bed(bed: NetworkBed, function: str, *args: Any, timeout_s: float = 300) -> list[Any]:
    """`FUNCTIONS[function](rank, world_size, *args)` with rank r in host r of `bed`."""
    with tempfile.TemporaryDirectory() as tmp:
        processes = []
        for rank in range(bed.hosts):
            env = {
                **os.environ,
                "MASTER_ADDR": bed.address(0),
                "MASTER_PORT": "29631",
                "RANK": str(rank),
                "WORLD_SIZE": str(bed.hosts),
                "GLOO_SOCKET_IFNAME": bed.interface,
                "OMP_NUM_THREADS": "1",
            }
            argv = [sys.executable, "-m", "tests.network.ranks", tmp, function, json.dumps(args)]
            processes.append(subprocess.Popen(bed.command(rank, argv), env=env))
        for process in processes:
            assert process.wait(timeout=timeout_s) == 0, f"a rank exited {process.returncode}"
        return [torch.load(Path(tmp) / f"{r}.pt", weights_only=True) for r in range(bed.hosts)]


def main(out: str, function: str, args: str) -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        result = FUNCTIONS[function](rank, dist.get_world_size(), *json.loads(args))
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out) / f"{rank}.pt")


if __name__ == "__main__":
    main(*sys.argv[1:4])
