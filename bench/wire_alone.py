"""The two-rank wire alone (no casts, no adds): the ways of moving one bucket's half-precision
values between 2 hosts of the network bed that the two-rank hook was chosen from, against
gloo's fp32 all_reduce of the same elements.

    python -m bench.wire_alone [--link 1gbit,10gbit] [--mib 25] [--reps 3] [--runs 2]

`--mib` is the fp32 bucket; every other variant moves the same elements as bf16:
`swap`: send and receive with the peer on one process group (gloo serves a pair through one
socket and one loop, so the two directions take turns); `swap_2_groups`: a process group per
direction (ring.PairDirections), the two transfers overlap; `pieces_8`: the bucket in 8
pieces sent and received on one group; `pieces_8_2_groups`: both, what jobs of two gloo
ranks use (ring.pipelined_pair_average_, whose casts and adds are left out here);
`gloo_bf16`: gloo's own all_reduce of the bf16 values; `all_gather`: gloo's all_gather of
them. Each figure is the median of `--reps` calls (slowest rank), the variants taking turns
call by call; `floor` is the bytes a rank sent (read off its interface) over the link rate.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.workers.training.ring import PairDirections
from bench.allreduce import _timed_rounds

PIECES = 8


def _wire_variants(rank: int, world_size: int, numel: int) -> dict[str, Callable[[], object]]:
    peer = 1 - rank
    bucket = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    mine = bucket.to(torch.bfloat16)
    theirs = torch.empty_like(mine)
    gathered = torch.empty(world_size * numel, dtype=torch.bfloat16)
    directions = PairDirections()
    send_group, receive_group = directions.send_receive()

    def exchange(pieces: int, send: Any, receive: Any) -> Callable[[], None]:
        def call() -> None:
            works = []
            for out, into in zip(
                mine.tensor_split(pieces), theirs.tensor_split(pieces), strict=True
            ):
                works += [dist.isend(out, peer, group=send), dist.irecv(into, peer, group=receive)]
            for work in works:
                work.wait()  # type: ignore[union-attr]

        return call

    return {
        "fp32": lambda: dist.all_reduce(bucket),
        "swap": exchange(1, None, None),
        "swap_2_groups": exchange(1, send_group, receive_group),
        "pieces_8": exchange(PIECES, None, None),
        "pieces_8_2_groups": exchange(PIECES, send_group, receive_group),
        "gloo_bf16": lambda: dist.all_reduce(mine),
        "all_gather": lambda: dist.all_gather_into_tensor(gathered, mine),
    }


def _measure(rank: int, world_size: int, numel: int, reps: int) -> dict[str, Any]:
    functions = _wire_variants(rank, world_size, numel)
    return _timed_rounds(functions, lambda: None, reps, "eth0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", default="1gbit", help="rates, comma-separated")
    parser.add_argument("--mib", type=float, default=25.0, help="the fp32 bucket")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2, help="each on a fresh bed")
    args = parser.parse_args()
    from tests.support.bedranks import run_on_bed
    from tests.support.netbed import network_bed, rate_bits

    numel = int(args.mib * 2**20) // 4
    for rate in args.link.split(","):
        runs = []
        for _ in range(args.runs):
            with network_bed(2, rate=rate) as bed:
                runs.append(run_on_bed(bed, _measure, numel, args.reps, timeout_s=900)[0])
        print(
            f"2 hosts, {rate}, {args.mib:g} MiB fp32 bucket (the same elements as bf16 for "
            f"the rest); median of {args.reps} calls, each run on a fresh bed"
        )
        print(f"{'variant':>18} {'ms by run':>20} {'vs fp32':>8} {'floor':>7}")
        fp32 = statistics.median(run["seconds"]["fp32"] for run in runs)
        for name in runs[0]["seconds"]:
            seconds = [run["seconds"][name] for run in runs]
            floor = statistics.median(run["sent"][name] for run in runs) * 8 / rate_bits(rate)
            print(
                f"{name:>18} {', '.join(f'{s * 1000:.0f}' for s in seconds):>20} "
                f"{statistics.median(seconds) / fp32:>7.2f}x {floor / fp32:>6.2f}x"
            )


if __name__ == "__main__":
    main()
