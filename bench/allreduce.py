"""AllReduce of one gradient bucket on 2 gloo ranks over loopback: our bf16 and fp16 wire
formats against fp32 (what DDP does by default), side by side in one run.

    python -m bench.allreduce [--sizes-mib 1 5 10 25 50 100] [--reps 9] [--runs 3]

Each timing covers the whole hook's work on a persistent bucket, as DDP has one (divide,
cast, reduce, cast back); the bucket is refilled before each timed call. A figure is the
median of `reps` calls (slowest rank), a row the median of `runs` interleaved rounds.
gloo's own half-precision all_reduce is shown too: it is why the ring exists.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from ampfleet.workers.training.allreduce import compressed_all_reduce_
from ampfleet.workers.training.localranks import run_ranks
from ampfleet.workers.training.ring import Workspace

VARIANTS = ("fp32", "bf16", "fp16", "gloo_bf16", "gloo_fp16")


def _median_time(fn: Callable[[], object], refill: Callable[[], object], reps: int) -> float:
    refill()
    fn()  # warm-up: first-touch of workspace pages
    times = []
    for _ in range(reps):
        refill()
        dist.barrier()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    median = torch.tensor([statistics.median(times)])
    dist.all_reduce(median, op=dist.ReduceOp.MAX)  # every rank reports the slowest
    return float(median)


def _measure(rank: int, world_size: int, sizes_mib: list[float], reps: int) -> dict:
    results = {}
    for size in sizes_mib:
        numel = int(size * 2**20) // 4
        gradients = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
        bucket = torch.empty_like(gradients)
        workspace = Workspace()
        gloo_wire = {d: torch.empty(numel, dtype=d) for d in (torch.bfloat16, torch.float16)}

        def refill(bucket: torch.Tensor = bucket, gradients: torch.Tensor = gradients) -> None:
            bucket.copy_(gradients)

        def fp32(bucket: torch.Tensor = bucket) -> None:
            bucket.div_(world_size)
            dist.all_reduce(bucket)

        def ours(
            dtype: torch.dtype, bucket: torch.Tensor = bucket, workspace: Workspace = workspace
        ) -> Callable[[], object]:
            return lambda: compressed_all_reduce_(bucket, dtype, workspace=workspace)

        def gloo_native(
            dtype: torch.dtype, bucket: torch.Tensor = bucket, wires: dict = gloo_wire
        ) -> Callable[[], object]:
            def run() -> None:
                torch.div(bucket, world_size, out=wires[dtype])
                dist.all_reduce(wires[dtype])
                bucket.copy_(wires[dtype])

            return run

        functions = {
            "fp32": fp32,
            "bf16": ours(torch.bfloat16),
            "fp16": ours(torch.float16),
            "gloo_bf16": gloo_native(torch.bfloat16),
            "gloo_fp16": gloo_native(torch.float16),
        }
        results[size] = {name: _median_time(functions[name], refill, reps) for name in VARIANTS}
        results[size]["wire_bytes"] = {"fp32": numel * 4, "half": numel * 2}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=[1, 5, 10, 25, 50, 100])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    rounds = [run_ranks(_measure, 2, args.sizes_mib, args.reps)[0] for _ in range(args.runs)]
    print(f"2 gloo ranks, loopback; median of {args.runs} runs x {args.reps} calls")
    header = (
        f"{'bucket':>8} {'fp32 ms':>8} {'bf16 ms':>8} {'fp16 ms':>8} | {'bf16/fp32':>9} "
        f"{'fp16/fp32':>9} {'bytes':>6} | {'gloo bf16':>9} {'gloo fp16':>9}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes_mib:
        med = {k: statistics.median(r[size][k] for r in rounds) for k in VARIANTS}
        wire = rounds[0][size]["wire_bytes"]
        fp32 = med["fp32"]
        print(
            f"{size:>6g}Mi {fp32 * 1e3:>8.2f} {med['bf16'] * 1e3:>8.2f} "
            f"{med['fp16'] * 1e3:>8.2f} | {med['bf16'] / fp32:>8.2f}x "
            f"{med['fp16'] / fp32:>8.2f}x {wire['half'] / wire['fp32']:>5.2f}x | "
            f"{med['gloo_bf16'] / fp32:>8.2f}x {med['gloo_fp16'] / fp32:>8.2f}x"
        )


if __name__ == "__main__":
    main()
