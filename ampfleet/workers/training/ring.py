"""A ring AllReduce for half-precision tensors on gloo, run on one communication thread.

gloo sums fp16 element by element in software: an fp16 all_reduce costs as much as fp32
although it moves half the bytes. Here gloo only moves bytes (isend/irecv) and torch's
vectorised CPU kernels do the additions: reduce-scatter around the ring, then all-gather,
2 (n-1)/n of the tensor sent per rank, as in any ring AllReduce.

DDP calls communication hooks on its autograd thread and waits on the returned futures at
the end of backward. Ring steps are blocking, so they run on one dedicated thread, in the
order the hooks were called (the same order on every rank, which keeps the point-to-point
messages matched), and backward goes on computing meanwhile.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

# Below this many elements per rank a ring's fixed costs dominate: use gloo's own reduce.
MIN_RING_ELEMENTS_PER_RANK = 4096


def ring_all_reduce_(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum `tensor` over the group in place, in its own dtype; returns it."""
    world_size = dist.get_world_size(group)
    if world_size == 1:
        return tensor
    if tensor.numel() < world_size * MIN_RING_ELEMENTS_PER_RANK:
        reduced = tensor.float()
        dist.all_reduce(reduced, group=group)
        return tensor.copy_(reduced)
    rank = dist.get_rank(group)
    peers = dist.get_process_group_ranks(group) if group is not None else list(range(world_size))
    send_to = peers[(rank + 1) % world_size]
    receive_from = peers[(rank - 1) % world_size]
    chunks = list(tensor.tensor_split(world_size))

    # Reduce-scatter: after n-1 steps this rank holds the full sum of chunk rank+1.
    for step in range(world_size - 1):
        outgoing = chunks[(rank - step) % world_size]
        target = chunks[(rank - step - 1) % world_size]
        incoming = torch.empty_like(target)
        _exchange(outgoing, send_to, incoming, receive_from)
        target.add_(incoming)

    # All-gather: pass the finished chunks around the ring.
    for step in range(world_size - 1):
        outgoing = chunks[(rank + 1 - step) % world_size]
        _exchange(outgoing, send_to, chunks[(rank - step) % world_size], receive_from)
    return tensor


def _exchange(
    outgoing: torch.Tensor, send_to: int, incoming: torch.Tensor, receive_from: int
) -> None:
    for work in (dist.isend(outgoing, send_to), dist.irecv(incoming, receive_from)):
        assert work is not None  # None only for ranks outside the group
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
