"""DDP communication hooks that AllReduce gradients in a half-precision dtype.

On NCCL we use torch's built-in compress hooks. On gloo torch's bf16 hook refuses to run
and its fp16 hook gains nothing (gloo sums fp16 in software), so we provide our own: divide
by the world size first (so an fp16 sum cannot overflow), cast, all_reduce, cast back.
"""

# No `from __future__ import annotations` here: DDP inspects the hook's annotations at
# registration and accepts only the real GradBucket/Future classes, not strings.

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import GradBucket  # type: ignore[attr-defined]
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from ampfleet.workers.training.precision import DTYPES

Hook = Callable[[Any, GradBucket], torch.futures.Future[torch.Tensor]]


def compress_hook(dtype: torch.dtype) -> Hook:
    def hook(
        process_group: dist.ProcessGroup | None, bucket: GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        compressed = buffer.div(dist.get_world_size(group)).to(dtype)
        future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def decompress(fut: torch.futures.Future[Any]) -> torch.Tensor:
            buffer.copy_(fut.value()[0])
            return buffer

        return future.then(decompress)  # type: ignore[no-any-return]

    hook.__name__ = f"{dtype}_compress_hook".replace("torch.", "")
    return hook


def register_allreduce_dtype(model: DistributedDataParallel, dtype_name: str, backend: str) -> None:
    if dtype_name == "fp32":
        return  # DDP's own fp32 AllReduce
    if backend == "nccl":
        builtin = {
            "bf16": default_hooks.bf16_compress_hook,
            "fp16": default_hooks.fp16_compress_hook,
        }[dtype_name]
        model.register_comm_hook(state=None, hook=builtin)
        return
    model.register_comm_hook(state=None, hook=compress_hook(DTYPES[dtype_name]))
