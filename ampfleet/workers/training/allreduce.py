"""Gradient AllReduce in a chosen dtype, as a DDP communication hook, with a numerical guard.

Wire formats: every half-precision path divides by the world size before the sum (so an
fp16 sum cannot overflow), casts, reduces, and casts back into the bucket.
  - NCCL: torch's built-in compress hooks.
  - gloo, bf16/fp16: ours (ring.py): gloo moves the bytes, torch does the additions (the
    two-rank swap or the ring), or gloo's own all_reduce of the half values where `auto`
    found it faster (a fast link: its sum is in the wire's precision, the guard watches).
    torch's own bf16 hook refuses gloo, and gloo's fp16 sum runs in software.
  - fp32 anywhere: the backend's own all_reduce, as DDP does by default.
Which dtype and wire `allreduce_dtype: auto` takes is measured at start (allreduce_auto.py).

The guard: every `guard_every` steps the first bucket is also reduced in fp32 and the
relative error of the compressed result is reported. Every rank sees the same two reduced
tensors and takes the same decision: past `guard_threshold` the job switches to fp32
AllReduce from the next step on, for good.

The hook also measures bytes sent per step and when the last bucket was launched: backward
ends by waiting for it, so the time after that launch is AllReduce time it did not hide.
"""

# No `from __future__ import annotations` here: DDP inspects the hook's annotations at
# registration and accepts only the real GradBucket/Future classes, not strings.

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import GradBucket  # type: ignore[attr-defined]
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from ampfleet.workers.training.group import started
from ampfleet.workers.training.precision import DTYPES
from ampfleet.workers.training.ring import (
    CommThread,
    PairDirections,
    Workspace,
    wire_average_,
)


@dataclass
class AllReduceState:
    dtype: torch.dtype
    backend: str
    guard_every: int = 50
    guard_threshold: float = 1e-2
    step: int = 0
    bytes_this_step: int = 0
    last_launch: float = 0.0
    last_relative_error: float | None = None
    switch_reason: str | None = None
    """Set once, when the guard switched this job to fp32."""
    algorithm: str | None = None
    """The gloo half-precision wire (ring.ALGORITHMS); None: ring.default_algorithm."""
    workspace: Workspace = field(default_factory=Workspace, repr=False)
    directions: PairDirections | None = field(default=None, repr=False)
    """Two ranks on gloo: a process group per direction of the swap (see ring.py)."""
    _comm_thread: CommThread | None = field(default=None, repr=False)
    beat: Callable[[], None] | None = field(default=None, repr=False)
    """Told as each bucket is handed over: the rank's compute for it is done, and from here
    it may wait for its peers (the heartbeat's `allreduce` phase)."""

    def begin_step(self, step: int) -> None:
        """Called between steps, when no AllReduce is in flight."""
        self.step = step
        self.bytes_this_step = 0
        self.last_launch = 0.0
        if self.switch_reason is not None:
            self.dtype = torch.float32

    @property
    def dtype_name(self) -> str:
        return {v: k for k, v in DTYPES.items()}[self.dtype]

    def close(self) -> None:
        if self._comm_thread is not None:
            self._comm_thread.close()
            self._comm_thread = None

    @property
    def comm_thread(self) -> CommThread:
        if self._comm_thread is None:
            self._comm_thread = CommThread()
        return self._comm_thread

    def check_guard(self, result: torch.Tensor, reference: torch.Tensor) -> None:
        denominator = reference.norm().clamp_min(torch.finfo(torch.float32).tiny)
        self.record_error(float((result.float() - reference).norm() / denominator))

    def record_error(self, error: float) -> None:
        """The guard's decision on one measured relative error (FSDP's reduce-scatter
        measures its own over every rank's shard)."""
        self.last_relative_error = error
        if error > self.guard_threshold and self.switch_reason is None:
            self.switch_reason = (
                f"{self.dtype_name} AllReduce relative error {error:.2e} exceeded "
                f"{self.guard_threshold:.0e} at step {self.step}; switched to fp32"
            )


def compressed_all_reduce_(
    buffer: torch.Tensor,
    dtype: torch.dtype,
    *,
    workspace: Workspace | None = None,
    key: int = 0,
    reference: torch.Tensor | None = None,
    state: AllReduceState | None = None,
    directions: PairDirections | None = None,
    algorithm: str | None = None,
) -> torch.Tensor:
    """Average `buffer` over the world through a `dtype` wire, in place (the gloo path);
    with a `reference`, reduce it in fp32 too and let the guard compare the two."""
    if reference is not None:
        dist.all_reduce(reference)
    wire_average_(buffer, dtype, workspace or Workspace(), key, directions, algorithm)
    if reference is not None and state is not None:
        state.check_guard(buffer, reference)
    return buffer


def allreduce_hook(state: AllReduceState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    world_size = dist.get_world_size()
    state.bytes_this_step += buffer.numel() * torch.empty((), dtype=state.dtype).element_size()
    state.last_launch = time.perf_counter()
    if state.beat is not None:
        state.beat()

    if state.dtype == torch.float32:
        buffer.div_(world_size)
        work = started(dist.all_reduce(buffer, async_op=True))
        return work.get_future().then(lambda fut: fut.value()[0])

    checking = state.guard_every > 0 and bucket.index() == 0 and state.step % state.guard_every == 0
    reference = buffer.div(world_size) if checking else None
    if state.backend != "nccl":
        dtype, index = state.dtype, bucket.index()
        return state.comm_thread.submit(
            lambda: compressed_all_reduce_(
                buffer,
                dtype,
                workspace=state.workspace,
                key=index,
                reference=reference,
                state=state,
                directions=state.directions,
                algorithm=state.algorithm,
            )
        )
    if reference is not None:
        dist.all_reduce(reference)  # NCCL orders this on the stream before the compressed one
    builtin = (
        default_hooks.bf16_compress_hook
        if state.dtype == torch.bfloat16
        else default_hooks.fp16_compress_hook
    )
    compressed: Any = builtin(None, bucket)  # type: ignore[arg-type]  # None: the default group
    if reference is None:
        return compressed  # type: ignore[no-any-return]

    def guarded(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        result = fut.value()
        state.check_guard(result, reference)
        return result

    return compressed.then(guarded)  # type: ignore[no-any-return]


def attach(model: DistributedDataParallel, state: AllReduceState) -> None:
    """Every dtype goes through our hook (fp32 too) so every run is measured the same way."""
    if state.backend != "nccl" and dist.get_world_size() == 2 and state.directions is None:
        state.directions = PairDirections()
    model.register_comm_hook(state=state, hook=allreduce_hook)
