"""AllReduce through a half-precision wire, for gloo, on one communication thread.

gloo sums fp16 element by element in software, and even its bf16 all_reduce gains little
over fp32 on a CPU host. Here gloo only moves bytes (isend/irecv) and torch's vectorised
kernels do the arithmetic. Two algorithms, by world size:

- Two ranks swap their whole compressed contributions and each sums the pair in fp32.
  That sends n half values per rank, exactly what a ring sends (2 (n-1)/n of the tensor),
  in one round instead of two, and the sum itself is never rounded to the wire format:
  one rounding per contribution instead of three roundings in all, so bf16's relative
  error drops from about 2.4e-3 to about 1.6e-3 (L2, Gaussian-like gradients).
- Three or more: a ring, reduce-scatter then all-gather (swapping every contribution with
  every rank sends world_size/4 of fp32's bytes: 0.75x at three ranks, nothing saved from
  four). Casting into the wire and back out is
  interleaved with the transfers: each chunk is compressed just before it is first needed
  and decompressed as soon as it is final, while the next message is in flight.

DDP calls communication hooks on its autograd thread and waits on the returned futures at
the end of backward. Ring steps block, so they run on one dedicated thread, in the order
the hooks were called (the same order on every rank, which keeps the point-to-point
messages matched), and backward goes on computing meanwhile.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.workers.training.group import new_group, started

# Below this many elements per rank a ring's fixed costs dominate: use gloo's own reduce.
MIN_RING_ELEMENTS_PER_RANK = 4096
# fp32 += bf16 in one op takes torch's mixed-dtype path, 2-3x slower than widening a slice
# this size into a scratch buffer that stays in the core's cache and adding fp32 to fp32.
WIDEN_ELEMENTS = 1 << 16
# Pieces of a bucket in the pipelined swap: the cast of the first piece and the add of the
# last are not hidden behind a transfer, so more pieces hide more; each piece costs two
# messages. Chosen on the network bed (BENCHMARKS.md).
PIPELINE_CHUNKS = 8


class Workspace:
    """Buffers kept from step to step. A fresh multi-MiB tensor is fresh pages from the OS,
    and faulting them in costs about as much as sending them over loopback."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, int], torch.Tensor] = {}

    def get(self, name: str, key: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = self._buffers.get((name, key))
        if buffer is None or buffer.numel() < numel or buffer.dtype != dtype:
            buffer = torch.empty(numel, dtype=dtype)
            self._buffers[(name, key)] = buffer
        return buffer[:numel]


ALGORITHMS = ("swap", "ring", "gloo")
"""The half-precision wires on gloo: the two-rank swap (two ranks only), the ring, and
gloo's own all_reduce of the half-precision values (which sums them in that precision).
Which is fastest depends on the link: `allreduce_dtype: auto` times them (allreduce.py)."""


def default_algorithm(world_size: int) -> str:
    """What a job that did not measure uses: the swap for two ranks, the ring from three."""
    return "swap" if world_size == 2 else "ring"


def wire_average_(
    buffer: torch.Tensor,
    dtype: torch.dtype,
    workspace: Workspace,
    key: int = 0,
    directions: PairDirections | None = None,
    algorithm: str | None = None,
) -> torch.Tensor:
    """Average the fp32 `buffer` over the default group through a `dtype` wire, in place,
    by `algorithm` (one of ALGORITHMS; default: `default_algorithm`).

    Every contribution is divided by the world size in fp32 before it is cast to the wire:
    the ring's fp16 partial sums cannot overflow, and dividing fp16 values instead would
    push small gradients into its subnormal range.
    """
    world_size = dist.get_world_size()
    if world_size == 1:
        return buffer
    if buffer.numel() < world_size * MIN_RING_ELEMENTS_PER_RANK:
        buffer.div_(world_size)
        dist.all_reduce(buffer)
        return buffer
    algorithm = algorithm or default_algorithm(world_size)
    if algorithm == "gloo":
        wire = workspace.get("wire", key, buffer.numel(), dtype)
        wire.copy_(buffer.div_(world_size))
        dist.all_reduce(wire)
        return buffer.copy_(wire)
    if algorithm == "ring" or world_size > 2:
        return ring_average_(buffer, dtype, workspace, key)
    if directions is not None:
        return pipelined_pair_average_(buffer, dtype, workspace, directions, key)
    return pair_average_(buffer, dtype, workspace, key)


def pair_average_(
    buffer: torch.Tensor,
    dtype: torch.dtype,
    workspace: Workspace,
    key: int = 0,
    swap: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """Two ranks: swap the compressed contributions, add the pair in fp32.

    Both ranks add the same two wire values (fp32 addition commutes), so they end with
    bit-identical gradients, as DDP requires. `swap(mine, theirs)` moves the bytes (the
    peer by default; a benchmark passes a no-op to time the arithmetic alone).
    """
    mine = workspace.get("wire", key, buffer.numel(), dtype)
    theirs = workspace.get("peer", key, buffer.numel(), dtype)
    widened = workspace.get("widened", 0, WIDEN_ELEMENTS, torch.float32)
    mine.copy_(buffer.div_(2))
    (swap or _swap_with_peer)(mine, theirs)
    for start in range(0, buffer.numel(), WIDEN_ELEMENTS):
        span = slice(start, start + WIDEN_ELEMENTS)
        out = buffer[span]
        out.copy_(mine[span])  # this rank's contribution as the peer received it
        out.add_(widened[: out.numel()].copy_(theirs[span]))
    return buffer


class PairDirections:
    """Two process groups over the same two ranks, one for each direction of the swap.

    gloo serves one pair of ranks in a group through one socket and one event loop, and a
    swap through it sends and receives in turn: on a 1 Gbit/s link that took 0.96x of the
    fp32 all_reduce's time for half its bytes. Rank 0 sends on the first group and
    receives on the second (rank 1 the other way round), so each direction has a socket
    and a loop of its own and the two transfers overlap. Created by every rank, in the
    same order, outside the communication thread (new_group is collective).
    """

    def __init__(self) -> None:
        self.groups = (new_group([0, 1]), new_group([0, 1]))

    def send_receive(self) -> tuple[Any, Any]:
        first, second = self.groups
        return (first, second) if dist.get_rank() == 0 else (second, first)


def pipelined_pair_average_(
    buffer: torch.Tensor,
    dtype: torch.dtype,
    workspace: Workspace,
    directions: PairDirections,
    key: int = 0,
    chunks: int = PIPELINE_CHUNKS,
) -> torch.Tensor:
    """`pair_average_`'s numbers (bit for bit), with both directions at once and the
    bucket in `chunks` pieces: each piece is cast just before it is sent, while the one
    before it is on the wire, and added as soon as it has arrived."""
    peer = 1 - dist.get_rank()
    send_group, receive_group = directions.send_receive()
    mine = workspace.get("wire", key, buffer.numel(), dtype).tensor_split(chunks)
    theirs = workspace.get("peer", key, buffer.numel(), dtype).tensor_split(chunks)
    widened = workspace.get("widened", 0, WIDEN_ELEMENTS, torch.float32)
    source = buffer.tensor_split(chunks)
    in_flight: list[list[dist.Work]] = []

    def finish(index: int) -> None:
        _wait(in_flight[index])
        for start in range(0, source[index].numel(), WIDEN_ELEMENTS):
            span = slice(start, start + WIDEN_ELEMENTS)
            out = source[index][span]
            out.copy_(mine[index][span])
            out.add_(widened[: out.numel()].copy_(theirs[index][span]))

    for index in range(chunks):
        mine[index].copy_(source[index].div_(2))
        in_flight.append(
            [
                started(dist.isend(mine[index], peer, group=send_group)),
                started(dist.irecv(theirs[index], peer, group=receive_group)),
            ]
        )
        if index:
            finish(index - 1)
    finish(chunks - 1)
    return buffer


def _swap_with_peer(mine: torch.Tensor, theirs: torch.Tensor) -> None:
    peer = 1 - dist.get_rank()
    _wait(_start_exchange(mine, peer, theirs, peer))


def ring_average_(
    buffer: torch.Tensor, dtype: torch.dtype, workspace: Workspace, key: int = 0
) -> torch.Tensor:
    """The ring for any world size (`wire_average_` takes it from three ranks on)."""
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    send_to, receive_from = (rank + 1) % world_size, (rank - 1) % world_size
    wire = workspace.get("wire", key, buffer.numel(), dtype)
    source = buffer.tensor_split(world_size)
    chunks = wire.tensor_split(world_size)
    scratch = workspace.get("scratch", key, chunks[0].numel(), dtype)
    compressed = [False] * world_size

    def compress(index: int) -> None:
        if not compressed[index]:
            # Divide in fp32, then cast (see wire_average_); the bucket chunk is
            # overwritten with the result. Two passes on purpose: torch.div(...,
            # out=<half tensor>) takes a mixed-dtype path 7x slower than these two.
            chunks[index].copy_(source[index].div_(world_size))
            compressed[index] = True

    # Reduce-scatter: after n-1 steps this rank holds the whole sum of chunk rank+1.
    compress(rank)
    for step in range(world_size - 1):
        outgoing, incoming = (rank - step) % world_size, (rank - step - 1) % world_size
        received = scratch[: chunks[incoming].numel()]
        works = _start_exchange(chunks[outgoing], send_to, received, receive_from)
        compress(incoming)  # overlaps the transfer
        _wait(works)
        chunks[incoming].add_(received)

    # All-gather: pass the finished chunks around; copy each out as soon as it is final.
    for step in range(world_size - 1):
        outgoing, incoming = (rank + 1 - step) % world_size, (rank - step) % world_size
        works = _start_exchange(chunks[outgoing], send_to, chunks[incoming], receive_from)
        source[outgoing].copy_(chunks[outgoing])  # overlaps the transfer
        _wait(works)
    last = (rank + 2 - world_size) % world_size
    source[last].copy_(chunks[last])
    return buffer


def _start_exchange(
    outgoing: torch.Tensor, send_to: int, incoming: torch.Tensor, receive_from: int
) -> list[dist.Work]:
    return [started(dist.isend(outgoing, send_to)), started(dist.irecv(incoming, receive_from))]


def _wait(works: list[dist.Work]) -> None:
    for work in works:
        work.wait()


class CommThread:
    """One thread that runs communication jobs in submission order, each with a future."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], torch.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="allreduce", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Finish queued jobs and stop; before the process group is destroyed."""
        self._jobs.put(None)
        self._thread.join()

    def submit(self, job: Callable[[], Any]) -> torch.futures.Future[Any]:
        future: torch.futures.Future[Any] = torch.futures.Future()
        self._jobs.put((job, future))
        return future

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, future = item
            try:
                future.set_result(job())
            except Exception as exc:
                future.set_exception(exc)
