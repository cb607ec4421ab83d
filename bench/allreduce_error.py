"""How far a half-precision AllReduce lands from the exact sum, by world size: each wire
jobs may use (the pair swap at two ranks, the default there; the ring, the default from
three; gloo's own all_reduce, which `auto` may take on either), against the least error any
reduction that sends half of fp32's bytes can have.

    python -m bench.allreduce_error --world-sizes 2 3 4 --elements 4000000

The floor: at two ranks, each contribution rounded once to the wire format and the pair
added in fp32 (what the swap does). From three ranks, a reduction that sends at most
half of fp32's bytes cannot send every contribution to every rank (that is world_size/4
of fp32's bytes: 0.75x at three), so each part of the sum reaches most ranks as one
already-summed message in the wire format: at least one more rounding, of the sum. The
ring also rounds its partial sums along the way. Gaussian gradients, a different seed per
rank; relative error in the L2 norm, against the sum in float64.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from ampfleet.workers.training.ring import ALGORITHMS, Workspace, wire_average_
from tests.support.localranks import run_ranks

WIRE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _contribution(rank: int, elements: int) -> torch.Tensor:
    return torch.randn(elements, generator=torch.Generator().manual_seed(rank)) * 1e-2


def _reduced(rank: int, world_size: int, elements: int, wire: str, algorithm: str) -> torch.Tensor:
    torch.set_num_threads(1)
    buffer = _contribution(rank, elements)
    wire_average_(buffer, WIRE[wire], Workspace(), algorithm=algorithm)
    dist.barrier()
    return buffer * world_size  # the hooks average; the reference is a sum


def _relative(value: torch.Tensor, exact: torch.Tensor) -> float:
    return float((value.double() - exact).norm() / exact.norm())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--elements", type=int, default=4_000_000)
    args = parser.parse_args()
    print(f"{'ranks':>5} {'wire':>5} {'by':>5} {'error':>10} {'floor':>10}  error/floor")
    for world_size in args.world_sizes:
        parts = [_contribution(rank, args.elements) for rank in range(world_size)]
        exact = torch.stack([p.double() for p in parts]).sum(0)
        for wire, dtype in WIRE.items():
            rounded = torch.stack([p.to(dtype).float() for p in parts]).sum(0)
            floor = rounded if world_size == 2 else rounded.to(dtype).float()
            least = _relative(floor, exact)
            for algorithm in ALGORITHMS:
                if algorithm == "swap" and world_size != 2:
                    continue  # two ranks only
                results = run_ranks(
                    _reduced, world_size, args.elements, wire, algorithm, timeout_s=600
                )
                assert all(torch.equal(results[0], r) for r in results[1:]), "ranks disagree"
                error = _relative(results[0], exact)
                print(
                    f"{world_size:>5} {wire:>5} {algorithm:>5} {error:>10.3e} {least:>10.3e}  "
                    f"{error / least:.2f}x"
                )


if __name__ == "__main__":
    main()
