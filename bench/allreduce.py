"""AllReduce of one gradient bucket on gloo ranks: our bf16 and fp16 wire formats against
fp32 (what DDP does by default), side by side in one run; over loopback (2 ranks), or with
`--link`, one rank per host of the network bed (tests/support/netbed.py), each host on a
link of that rate, for 2 and 3 hosts.

    python -m bench.allreduce [--sizes-mib 1 5 10 25 50 100] [--reps 9] [--runs 3]
    python -m bench.allreduce --link 1gbit,10gbit [--hosts 2 3] [--sizes-mib 25 100]

Each timing covers the whole hook's work on a persistent bucket, as DDP has one (divide,
cast, reduce, cast back); the bucket is refilled before each timed call. The variants take
turns call by call, so a burst of load on the machine hits them alike, and a ratio is the
median over `reps` turns of the variant's time over fp32's in the same turn (the slowest
rank's times): a paired ratio, which load that comes and goes moves much less than it moves
either time. A row gives the median of `runs` runs of each figure.
`bytes` is what the half-precision hooks sent against fp32 (the larger of bf16 and fp16),
read off the loopback interface's counters: what went over it, TCP headers included.

`auto` is what `allreduce_dtype: auto` takes on that world: the job's own start-up
measurement (fp32 against every half-precision wire) runs first, and its pick is timed with
the rest; the picks are printed under each row. Also shown, all on bf16: gloo's own
half-precision all_reduce in one call (`gloo_bf16`; it sums in bf16) and as `auto`'s gloo
wire runs it, in pieces cast and widened while the others are reduced (`gloo_wire`); our
ring, which ranks use from three on, run here on two (a process group per direction, as
`auto` times it); and the two halves of our two-rank
hook's cost measured apart: `wire` moves its half-precision bytes with no arithmetic (as
the swap does: a process group per direction, in pieces), `casts` does its arithmetic
(divide, cast, widen, add) with no transfer. On a link, also: `swap`, the two-rank swap
through one process group (send and receive take turns), and `gather`, an all_gather of the
wire values summed in fp32 (one rounding per contribution at any world size, (world
size)/4 of fp32's bytes), and `late_recv`, the pipelined swap with each receive posted
beside its own piece's send, as it was before the hook posted every receive first. `floor`
is the hook's bytes over the link rate. On a link, bytes are read off each host's own
interface.

Under the times, the CPU each call cost (the busier rank's process, its threads and gloo's
together, in its own CPU time, which other work on the machine does not stretch): where a
reduction's time goes when the link is faster than the casts.
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

from ampfleet.workers.training.allreduce import AllReduceState, compressed_all_reduce_
from ampfleet.workers.training.allreduce_auto import measure_auto
from ampfleet.workers.training.ring import (
    PIPELINE_CHUNKS,
    SLICE_ELEMENTS,
    PairDirections,
    Workspace,
    add_pair_,
    compress_,
    gloo_average_,
    pair_average_,
    ring_average_,
)
from tests.support.localranks import run_ranks

VARIANTS = (
    "fp32", "bf16", "fp16", "auto", "gloo_bf16", "gloo_wire", "ring_bf16", "wire", "casts"
)  # fmt: skip
LINK_VARIANTS = (*VARIANTS, "swap", "gather", "late_recv")
# Where the ranks' bytes are counted: loopback carries every rank's (shared), a host of the
# bed only its own.
INTERFACE = {"loopback": "lo", "link": "eth0"}


def interface_bytes(interface: str) -> int:
    """Bytes `interface` has carried (received, which on lo is also sent), headers too."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == interface:
            return int(counters.split()[0 if interface == "lo" else 8])
    raise RuntimeError(f"no interface {interface} in /proc/net/dev")


def _sent_bytes(fn: Callable[[], object], world_size: int, interface: str) -> float:
    """Bytes one call sends per rank, read off the interface's counters around it."""
    dist.barrier()
    before = interface_bytes(interface)
    fn()
    dist.barrier()
    sent = interface_bytes(interface) - before
    return sent / world_size if interface == "lo" else float(sent)


def _timed_rounds(
    functions: dict[str, Callable[[], object]],
    refill: Callable[[], object],
    reps: int,
    interface: str = "lo",
) -> dict[str, Any]:
    sent = {}
    for name, fn in functions.items():  # warm-up (first touch of workspace pages), bytes
        refill()
        sent[name] = _sent_bytes(fn, dist.get_world_size(), interface)
    turns = []  # per turn, per variant: (wall, CPU) seconds
    for _ in range(reps):
        turn = []
        for fn in functions.values():
            refill()
            dist.barrier()
            started, cpu_started = time.perf_counter(), time.process_time()
            fn()
            turn.append((time.perf_counter() - started, time.process_time() - cpu_started))
        turns.append(turn)
    table = torch.tensor(turns, dtype=torch.float64)  # turn, variant, (wall, CPU)
    dist.all_reduce(table, op=dist.ReduceOp.MAX)  # every rank reports the slowest
    most = torch.tensor([sent[name] for name in functions])
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    wall, cpu = table[..., 0], table[..., 1]
    return {
        "seconds": dict(zip(functions, wall.median(0).values.tolist(), strict=True)),
        "ratio": dict(zip(functions, (wall / wall[:, :1]).median(0).values.tolist(), strict=True)),
        "cpu": dict(zip(functions, cpu.median(0).values.tolist(), strict=True)),
        "sent": dict(zip(functions, most.tolist(), strict=True)),
    }


def _variants(
    rank: int, world_size: int, numel: int, mode: str
) -> tuple[dict[str, Callable[[], object]], Callable[[], object], str]:
    """Each variant's call on a bucket of `numel` fp32 gradients, the bucket's refill, and
    what `auto` picked (the job's own start-up measurement, run here first)."""
    peer = 1 - rank
    gradients = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    bucket = torch.empty_like(gradients)
    mine, theirs = (torch.empty(numel, dtype=torch.bfloat16) for _ in range(2))
    gathered = torch.empty(world_size * numel, dtype=torch.bfloat16)
    # One workspace per variant, as a job has (its wire dtype is fixed): a shared one would
    # reallocate at every dtype change, and fresh pages are slow.
    workspaces = {
        name: Workspace() for name in ("bf16", "fp16", "ring_bf16", "gloo_wire", "casts", "swap")
    }
    # As attach() gives a job of two gloo ranks.
    directions = PairDirections() if world_size == 2 else None
    state = AllReduceState(dtype=torch.bfloat16, backend="gloo", directions=directions)
    choice = measure_auto(state, "bf16", numel, torch.device("cpu"))
    workspaces["auto"] = Workspace()

    def fp32() -> None:
        bucket.div_(world_size)
        dist.all_reduce(bucket)

    def ours(dtype: torch.dtype, workspace: Workspace) -> Callable[[], object]:
        return lambda: compressed_all_reduce_(
            bucket, dtype, workspace=workspace, directions=directions
        )

    def gloo_bf16() -> None:
        torch.div(bucket, world_size, out=mine)
        dist.all_reduce(mine)
        bucket.copy_(mine)

    def gather() -> None:
        mine.copy_(bucket.div_(world_size))
        dist.all_gather_into_tensor(gathered, mine)
        bucket.copy_(gathered[:numel])
        for index in range(1, world_size):
            bucket.add_(gathered[index * numel : (index + 1) * numel].float())

    def wire() -> None:
        # The swap's transfers (pipelined_pair_average_) without its arithmetic.
        assert directions is not None
        send_group, receive_group = directions.send_receive()
        works = [
            dist.irecv(piece, peer, group=receive_group)
            for piece in theirs.tensor_split(PIPELINE_CHUNKS)
        ]
        for piece in mine.tensor_split(PIPELINE_CHUNKS):
            works.append(dist.isend(piece, peer, group=send_group))
        for work in works:
            work.wait()  # type: ignore[union-attr]

    scaled, widened = torch.empty(SLICE_ELEMENTS), torch.empty(SLICE_ELEMENTS)

    def late_receives() -> None:
        # The pipelined swap as it was, each receive posted beside its own piece's send:
        # gloo sends a piece only once its receiver is ready, a round trip later.
        assert directions is not None
        send_group, receive_group = directions.send_receive()
        pieces = list(
            zip(
                bucket.tensor_split(PIPELINE_CHUNKS),
                mine.tensor_split(PIPELINE_CHUNKS),
                theirs.tensor_split(PIPELINE_CHUNKS),
                strict=True,
            )
        )
        in_flight = []

        def finish(index: int) -> None:
            for work in in_flight[index]:
                work.wait()  # type: ignore[union-attr]
            add_pair_(*pieces[index], widened)

        for index, (source, outgoing, incoming) in enumerate(pieces):
            compress_(outgoing, source, 2, scaled)
            in_flight.append(
                (
                    dist.isend(outgoing, peer, group=send_group),
                    dist.irecv(incoming, peer, group=receive_group),
                )
            )
            if index:
                finish(index - 1)
        finish(len(pieces) - 1)

    primed: list[bool] = []

    def no_transfer(mine: torch.Tensor, theirs: torch.Tensor) -> None:
        if not primed:  # in the warm-up call: real numbers to add, not uninitialised memory
            theirs.copy_(mine)
            primed.append(True)

    def casts() -> None:
        pair_average_(bucket, torch.bfloat16, workspaces["casts"], swap=no_transfer)

    def auto() -> None:
        if choice.dtype == "fp32":
            fp32()
            return
        compressed_all_reduce_(
            bucket,
            torch.bfloat16,
            workspace=workspaces["auto"],
            directions=directions,
            algorithm=choice.wire,
        )

    functions = {
        "fp32": fp32,
        "auto": auto,
        "bf16": ours(torch.bfloat16, workspaces["bf16"]),
        "fp16": ours(torch.float16, workspaces["fp16"]),
        "gloo_bf16": gloo_bf16,
        "ring_bf16": lambda: ring_average_(
            bucket, torch.bfloat16, workspaces["ring_bf16"], 0, directions
        ),
        "gloo_wire": lambda: gloo_average_(bucket, torch.bfloat16, workspaces["gloo_wire"]),
        "swap": lambda: pair_average_(bucket, torch.bfloat16, workspaces["swap"]),
        "gather": gather,
        "late_recv": late_receives,
        "wire": wire,
        "casts": casts,
    }
    wanted: tuple[str, ...] = (*VARIANTS, "swap") if mode == "loopback" else LINK_VARIANTS
    if world_size != 2:  # the two-rank algorithms
        two_ranks = ("swap", "wire", "casts", "late_recv")
        wanted = tuple(name for name in wanted if name not in two_ranks)
    pick = f"{choice.dtype} by {choice.wire or 'default'}" if choice.dtype != "fp32" else "fp32"
    return {name: functions[name] for name in wanted}, lambda: bucket.copy_(gradients), pick


def _measure(
    rank: int, world_size: int, sizes_mib: list[float], reps: int, mode: str = "loopback"
) -> dict[float, dict[str, Any]]:
    results = {}
    for size in sizes_mib:
        functions, refill, pick = _variants(rank, world_size, int(size * 2**20) // 4, mode)
        results[size] = {**_timed_rounds(functions, refill, reps, INTERFACE[mode]), "pick": pick}
    return results


def _on_bed(hosts: int, rate: str, sizes_mib: list[float], reps: int) -> dict[float, Any]:
    """One run with rank r in host r of a fresh bed; rank 0's results."""
    from tests.support.bedranks import run_on_bed
    from tests.support.netbed import network_bed

    with network_bed(hosts, rate=rate) as bed:
        results: dict[float, Any] = run_on_bed(
            bed, _measure, sizes_mib, reps, "link", timeout_s=1800
        )[0]
        return results


def _table(rounds: list[dict[float, Any]], sizes_mib: list[float], rate: str | None) -> None:
    names = list(rounds[0][sizes_mib[0]]["seconds"])
    extra = [n for n in names if n not in ("fp32", "bf16", "fp16")]
    header = (
        f"{'bucket':>8} {'fp32 ms':>8} {'bf16 ms':>8} {'fp16 ms':>8} | {'bf16/fp32':>9} "
        f"{'fp16/fp32':>9} {'bytes':>6}"
        + (f" {'floor':>6}" if rate else "")
        + " | "
        + " ".join(f"{name:>9}" for name in extra)
    )
    print(header)
    print("-" * len(header))
    for size in sizes_mib:
        med = {k: statistics.median(r[size]["seconds"][k] for r in rounds) for k in names}
        sent = {k: statistics.median(r[size]["sent"][k] for r in rounds) for k in names}
        bytes_ratio = max(sent["bf16"], sent["fp16"]) / sent["fp32"]
        fp32 = med["fp32"]
        ratio = {k: statistics.median(r[size]["ratio"][k] for r in rounds) for k in names}
        floor = ""
        if rate:
            from tests.support.netbed import rate_bits

            seconds = max(sent["bf16"], sent["fp16"]) * 8 / rate_bits(rate)
            floor = f" {seconds / fp32:>5.2f}x"
        print(
            f"{size:>6g}Mi {fp32 * 1e3:>8.2f} {med['bf16'] * 1e3:>8.2f} "
            f"{med['fp16'] * 1e3:>8.2f} | {ratio['bf16']:>8.2f}x {ratio['fp16']:>8.2f}x "
            f"{bytes_ratio:>5.2f}x{floor} | " + " ".join(f"{ratio[k]:>8.2f}x" for k in extra)
        )
        picks = ", ".join(str(r[size]["pick"]) for r in rounds)
        print(f"{'':>8} auto picked, round by round: {picks}")
        cpu = {k: statistics.median(r[size]["cpu"][k] for r in rounds) for k in names}
        spent = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in cpu.items())
        print(f"{'':>8} CPU ms per call: {spent}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=None)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--link", help="comma-separated rates of the bed's links: 1gbit,10gbit")
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 3])
    args = parser.parse_args()
    if not args.link:
        sizes = args.sizes_mib or [1, 5, 10, 25, 50, 100]
        rounds = [run_ranks(_measure, 2, sizes, args.reps)[0] for _ in range(args.runs)]
        print(f"2 gloo ranks, loopback; median of {args.runs} runs x {args.reps} calls")
        _table(rounds, sizes, None)
        return
    sizes = args.sizes_mib or [25, 100]
    for rate in args.link.split(","):
        for hosts in args.hosts:
            # Runs of each configuration interleaved with nothing else of ours: a bed per run.
            rounds = [_on_bed(hosts, rate, sizes, args.reps) for _ in range(args.runs)]
            print(
                f"\n{hosts} hosts x 1 gloo rank, {rate} links (tbf); "
                f"median of {args.runs} runs x {args.reps} calls"
            )
            _table(rounds, sizes, rate)


if __name__ == "__main__":
    main()
