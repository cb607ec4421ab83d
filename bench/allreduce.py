"""AllReduce of one gradient bucket on 2 gloo ranks over loopback: our bf16 and fp16 wire
formats against fp32 (what DDP does by default), side by side in one run.

    python -m bench.allreduce [--sizes-mib 1 5 10 25 50 100] [--reps 9] [--runs 3]

Each timing covers the whole hook's work on a persistent bucket, as DDP has one (divide,
cast, reduce, cast back); the bucket is refilled before each timed call. A figure is the
median of `reps` calls (slowest rank), a row the median of `runs` rounds in which the
variants take turns call by call, so a burst of load on the machine hits them alike.
`bytes` is what the half-precision hooks sent against fp32 (the larger of bf16 and fp16),
read off the loopback interface's counters: what went over it, TCP headers included.

Also shown, all on bf16: gloo's own half-precision all_reduce (why we do not use it); our
ring, which ranks use from three on, run here on two; and the two halves of our two-rank
hook's cost measured apart: `wire` moves its half-precision bytes with no arithmetic,
`casts` does its arithmetic (divide, cast, widen, add) with no transfer.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.workers.training.allreduce import compressed_all_reduce_
from ampfleet.workers.training.localranks import run_ranks
from ampfleet.workers.training.ring import Workspace, pair_average_, ring_average_

VARIANTS = ("fp32", "bf16", "fp16", "gloo_bf16", "ring_bf16", "wire", "casts")


def _loopback_bytes() -> int:
    """Bytes the loopback interface has carried: what the ranks really sent, headers too."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def _sent_bytes(fn: Callable[[], object], world_size: int) -> float:
    """Bytes one call sends per rank, read off the loopback counters around it."""
    dist.barrier()
    before = _loopback_bytes()
    fn()
    dist.barrier()
    return (_loopback_bytes() - before) / world_size


def _timed_rounds(
    functions: dict[str, Callable[[], object]], refill: Callable[[], object], reps: int
) -> dict[str, Any]:
    sent = {}
    for name, fn in functions.items():  # warm-up (first touch of workspace pages), bytes
        refill()
        sent[name] = _sent_bytes(fn, dist.get_world_size())
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(reps):
        for name, fn in functions.items():
            refill()
            dist.barrier()
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    medians = torch.tensor([statistics.median(times[name]) for name in functions])
    dist.all_reduce(medians, op=dist.ReduceOp.MAX)  # every rank reports the slowest
    return {"seconds": dict(zip(functions, medians.tolist(), strict=True)), "sent": sent}


def _variants(
    rank: int, world_size: int, numel: int
) -> tuple[dict[str, Callable[[], object]], Callable[[], object]]:
    """Each variant's call on a bucket of `numel` fp32 gradients, and the bucket's refill."""
    peer = 1 - rank
    gradients = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    bucket = torch.empty_like(gradients)
    mine, theirs = (torch.empty(numel, dtype=torch.bfloat16) for _ in range(2))
    # One workspace per variant, as a job has (its wire dtype is fixed): a shared one would
    # reallocate at every dtype change, and fresh pages are slow.
    workspaces = {name: Workspace() for name in ("bf16", "fp16", "ring_bf16", "casts")}

    def fp32() -> None:
        bucket.div_(world_size)
        dist.all_reduce(bucket)

    def ours(dtype: torch.dtype, workspace: Workspace) -> Callable[[], object]:
        return lambda: compressed_all_reduce_(bucket, dtype, workspace=workspace)

    def gloo_bf16() -> None:
        torch.div(bucket, world_size, out=mine)
        dist.all_reduce(mine)
        bucket.copy_(mine)

    def wire() -> None:
        works = [dist.isend(mine, peer), dist.irecv(theirs, peer)]
        for work in works:
            work.wait()  # type: ignore[union-attr]

    primed: list[bool] = []

    def no_transfer(mine: torch.Tensor, theirs: torch.Tensor) -> None:
        if not primed:  # in the warm-up call: real numbers to add, not uninitialised memory
            theirs.copy_(mine)
            primed.append(True)

    def casts() -> None:
        pair_average_(bucket, torch.bfloat16, workspaces["casts"], swap=no_transfer)

    functions = {
        "fp32": fp32,
        "bf16": ours(torch.bfloat16, workspaces["bf16"]),
        "fp16": ours(torch.float16, workspaces["fp16"]),
        "gloo_bf16": gloo_bf16,
        "ring_bf16": lambda: ring_average_(bucket, torch.bfloat16, workspaces["ring_bf16"]),
        "wire": wire,
        "casts": casts,
    }
    return functions, lambda: bucket.copy_(gradients)


def _measure(
    rank: int, world_size: int, sizes_mib: list[float], reps: int
) -> dict[float, dict[str, Any]]:
    results = {}
    for size in sizes_mib:
        functions, refill = _variants(rank, world_size, int(size * 2**20) // 4)
        results[size] = _timed_rounds(functions, refill, reps)
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
        f"{'fp16/fp32':>9} {'bytes':>6} | {'gloo bf16':>9} {'ring bf16':>9} | "
        f"{'wire':>6} {'casts':>6}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes_mib:
        med = {k: statistics.median(r[size]["seconds"][k] for r in rounds) for k in VARIANTS}
        sent = {k: statistics.median(r[size]["sent"][k] for r in rounds) for k in VARIANTS}
        bytes_ratio = max(sent["bf16"], sent["fp16"]) / sent["fp32"]
        fp32 = med["fp32"]
        ratio = {k: med[k] / fp32 for k in VARIANTS}
        print(
            f"{size:>6g}Mi {fp32 * 1e3:>8.2f} {med['bf16'] * 1e3:>8.2f} "
            f"{med['fp16'] * 1e3:>8.2f} | {ratio['bf16']:>8.2f}x {ratio['fp16']:>8.2f}x "
            f"{bytes_ratio:>5.2f}x | {ratio['gloo_bf16']:>8.2f}x "
            f"{ratio['ring_bf16']:>8.2f}x | {ratio['wire']:>5.2f}x {ratio['casts']:>5.2f}x"
        )


if __name__ == "__main__":
    main()
