"""AllReduce through a half-precision wire, for gloo, on one communication thread.

gloo sums fp16 element by element in software, and even its bf16 all_reduce gains little
over fp32 on a CPU host. Here gloo only moves bytes (isend/irecv) and torch's vectorised
kernels do the arithmetic. Two algorithms, by world size (and gloo's own all_reduce of the
half-precision values as a third wire, where `auto` measures it faster):

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

The casts are passes over memory, and on a CPU host they cost about what the link saves at
10 Gbit/s (BENCHMARKS.md): each pass works a slice that stays in the core's cache at a
time, so that a bucket's values are read once on the way out and written once on the way
back, and nothing else of theirs goes out to memory.

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
# The casts' unit of work: 256 KiB of fp32, which stays in a core's L2 cache between the
# steps of a pass (scale then cast; widen then add). fp32 += bf16 in one op, torch's
# mixed-dtype path, is slower than widening a slice into a scratch buffer and adding fp32.
SLICE_ELEMENTS = 1 << 16
# Pieces of a bucket in the pipelined swap: the cast of the first piece and the add of the
# last are not hidden behind a transfer, so more pieces hide more; each piece costs two
# messages. Chosen on the network bed (BENCHMARKS.md).
PIPELINE_CHUNKS = 8
# Pieces of a bucket on gloo's own wire: each is an all_reduce of its own, cast while the
# piece before it is on the wire and widened as soon as it is back.
GLOO_PIECES = 4


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
        return gloo_average_(buffer, dtype, workspace, key)
    if algorithm == "ring" or world_size > 2:
        return ring_average_(buffer, dtype, workspace, key, directions)
    if directions is not None:
        return pipelined_pair_average_(buffer, dtype, workspace, directions, key)
    return pair_average_(buffer, dtype, workspace, key)


def compress_(
    wire: torch.Tensor, source: torch.Tensor, world_size: int, scratch: torch.Tensor
) -> torch.Tensor:
    """`wire` = `source` / `world_size`, rounded to the wire's dtype, a slice at a time
    through the fp32 `scratch` (SLICE_ELEMENTS long): `source` is read once and left as it
    was. Dividing it in place and casting it after, two whole passes, moved 14 bytes of
    memory per value instead of 6. (torch.div straight into a half-precision `out` takes a
    mixed-dtype path several times slower than either.)"""
    # x * (1/n) is x / n exactly when n is a power of two, and a multiply costs less.
    by_power_of_two = world_size & (world_size - 1) == 0
    for part, out in zip(source.split(SLICE_ELEMENTS), wire.split(SLICE_ELEMENTS), strict=True):
        scaled = scratch[: part.numel()]
        if by_power_of_two:
            torch.mul(part, 1.0 / world_size, out=scaled)
        else:
            torch.div(part, world_size, out=scaled)
        out.copy_(scaled)
    return wire


def add_pair_(
    out: torch.Tensor, mine: torch.Tensor, theirs: torch.Tensor, widened: torch.Tensor
) -> torch.Tensor:
    """`out` = `mine` + `theirs`, both widened to fp32 and added in fp32, a slice at a time
    (`widened`: an fp32 scratch SLICE_ELEMENTS long). fp32 addition commutes, so two ranks
    that add the same pair each way round hold the same bits."""
    slices = zip(
        out.split(SLICE_ELEMENTS),
        mine.split(SLICE_ELEMENTS),
        theirs.split(SLICE_ELEMENTS),
        strict=True,
    )
    for part, own, peer in slices:
        part.copy_(own)
        part.add_(widened[: part.numel()].copy_(peer))
    return out


def _slice_scratch(workspace: Workspace, name: str) -> torch.Tensor:
    """One cache-sized fp32 scratch per use; the communication thread runs one bucket at a
    time, so every bucket shares it."""
    return workspace.get(name, 0, SLICE_ELEMENTS, torch.float32)


def gloo_average_(
    buffer: torch.Tensor,
    dtype: torch.dtype,
    workspace: Workspace,
    key: int = 0,
    pieces: int = GLOO_PIECES,
) -> torch.Tensor:
    """gloo's own all_reduce of the wire values (it sums them in the wire's precision: one
    more rounding than the swap), a piece at a time: each piece is cast while the one before
    it is reduced, and widened back as soon as it is done."""
    world_size = dist.get_world_size()
    wire = workspace.get("wire", key, buffer.numel(), dtype).tensor_split(pieces)
    source = buffer.tensor_split(pieces)
    scratch = _slice_scratch(workspace, "scaled")
    works: list[dist.Work] = []
    for index in range(pieces):
        compress_(wire[index], source[index], world_size, scratch)
        works.append(started(dist.all_reduce(wire[index], async_op=True)))
        if index:
            works[index - 1].wait()
            source[index - 1].copy_(wire[index - 1])
    works[-1].wait()
    source[-1].copy_(wire[-1])
    return buffer


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
    compress_(mine, buffer, 2, _slice_scratch(workspace, "scaled"))
    (swap or _swap_with_peer)(mine, theirs)
    # This rank's contribution as the peer received it, plus the peer's.
    return add_pair_(buffer, mine, theirs, _slice_scratch(workspace, "widened"))


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
    before it is on the wire, and added as soon as it has arrived.

    Every receive is posted first. gloo sends a message only once its receiver has said it
    is ready for it (a round trip per message): a receive posted only beside its own send
    held the peer's piece back by that round trip, and woke both ranks' event loops for each
    piece: up to a third more CPU per 25 MiB bucket at 10 Gbit/s (BENCHMARKS.md, `late_recv`)."""
    peer = 1 - dist.get_rank()
    send_group, receive_group = directions.send_receive()
    mine = workspace.get("wire", key, buffer.numel(), dtype).tensor_split(chunks)
    theirs = workspace.get("peer", key, buffer.numel(), dtype).tensor_split(chunks)
    scaled = _slice_scratch(workspace, "scaled")
    widened = _slice_scratch(workspace, "widened")
    source = buffer.tensor_split(chunks)
    received = [started(dist.irecv(piece, peer, group=receive_group)) for piece in theirs]
    sent: list[dist.Work] = []

    def finish(index: int) -> None:
        received[index].wait()
        add_pair_(source[index], mine[index], theirs[index], widened)

    for index in range(chunks):
        compress_(mine[index], source[index], 2, scaled)
        sent.append(started(dist.isend(mine[index], peer, group=send_group)))
        if index:
            finish(index - 1)
    finish(chunks - 1)
    _wait(sent)  # the wire buffers are the next step's
    return buffer


def _swap_with_peer(mine: torch.Tensor, theirs: torch.Tensor) -> None:
    peer = 1 - dist.get_rank()
    _wait(_start_exchange(mine, peer, theirs, peer))


def ring_average_(
    buffer: torch.Tensor,
    dtype: torch.dtype,
    workspace: Workspace,
    key: int = 0,
    directions: PairDirections | None = None,
) -> torch.Tensor:
    """The ring for any world size (`wire_average_` takes it from three ranks on; on two,
    where `auto` measures it, it sends and receives on `directions`' groups at once)."""
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    send_to, receive_from = (rank + 1) % world_size, (rank - 1) % world_size
    groups = directions.send_receive() if directions is not None else (None, None)
    wire = workspace.get("wire", key, buffer.numel(), dtype)
    source = buffer.tensor_split(world_size)
    chunks = wire.tensor_split(world_size)
    scratch = workspace.get("scratch", key, chunks[0].numel(), dtype)
    scaled = _slice_scratch(workspace, "scaled")
    compressed = [False] * world_size

    def compress(index: int) -> None:
        if not compressed[index]:
            # Divide in fp32, then cast (see wire_average_); the bucket chunk is
            # overwritten with the result in the all-gather.
            compress_(chunks[index], source[index], world_size, scaled)
            compressed[index] = True

    def exchange(outgoing: torch.Tensor, incoming: torch.Tensor) -> list[dist.Work]:
        return [
            started(dist.isend(outgoing, send_to, group=groups[0])),
            started(dist.irecv(incoming, receive_from, group=groups[1])),
        ]

    # Reduce-scatter: after n-1 steps this rank holds the whole sum of chunk rank+1.
    compress(rank)
    for step in range(world_size - 1):
        outgoing, incoming = (rank - step) % world_size, (rank - step - 1) % world_size
        received = scratch[: chunks[incoming].numel()]
        works = exchange(chunks[outgoing], received)
        compress(incoming)  # overlaps the transfer
        _wait(works)
        chunks[incoming].add_(received)

    # All-gather: pass the finished chunks around; copy each out as soon as it is final.
    for step in range(world_size - 1):
        outgoing, incoming = (rank + 1 - step) % world_size, (rank - step) % world_size
        works = exchange(chunks[outgoing], chunks[incoming])
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
