"""How the ranks share the model: DDP (every rank a whole replica) or FSDP2 (every rank a
shard of the fp32 master weights and of the optimizer states).

Under FSDP each block the recipe names (its transformer layers; otherwise the model's
top-level children that hold parameters) is one `fully_shard` unit and the root holds the
rest (embeddings, tied heads). The `MixedPrecisionPolicy` makes the dtype of each phase
explicit: the fp32 shards are what the optimizer steps and what a checkpoint holds; they are
all-gathered in the compute precision (`param_dtype`) block by block, and the gradients are
reduce-scattered in the job's AllReduce dtype (`reduce_dtype`) back into fp32 shards.

`auto` picks FSDP when the model states, measured on the built model, would take more than
a share of one rank's memory: 16 bytes per fp32 parameter (weights, gradients, two AdamW
moments) for DDP, a world-size-th of it under FSDP.

The reduce-scatter goes through `GuardedReduceScatter`, so FSDP is measured like DDP's hook:
bytes, the time spent in the collectives, and every `guard_every` steps the numerical guard
(the same reduction in fp32, the relative error over the whole gradient, the switch to fp32
past the threshold, all in `AllReduceState`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

# The custom-collective interfaces `set_custom_all_gather` takes: torch 2.13 defines them in
# private modules only.
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllocMixin
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from ampfleet.core.spec import Parallelism
from ampfleet.workers.rank_memory import memory_limit_mb
from ampfleet.workers.training.allreduce import AllReduceState, attach
from ampfleet.workers.training.precision import DTYPES

MB = 1024 * 1024
# fp32 weights + fp32 gradients + AdamW's two fp32 moments.
STATE_BYTES_PER_PARAMETER = 16


@dataclass(frozen=True)
class ParallelConfig:
    strategy: str = "ddp"
    """As requested: auto | ddp | fsdp."""
    auto_memory_share: float = 0.5
    reshard_after_forward: bool = True
    activation_checkpointing: str = "none"
    compile: bool = False

    @classmethod
    def from_spec(cls, parallelism: Parallelism) -> ParallelConfig:
        return cls(**parallelism.model_dump())


@dataclass(frozen=True)
class StrategyChoice:
    strategy: str
    state_bytes: int
    """Model states (weights, gradients, optimizer) of one whole replica."""
    rank_memory_bytes: int | None
    reason: str


def model_state_bytes(model: nn.Module) -> int:
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return parameters * STATE_BYTES_PER_PARAMETER


def rank_memory_bytes(device: torch.device, ranks_on_node: int) -> int | None:
    """The memory one rank may use: its GPU's; on the CPU its limit (the slot's share the
    launcher sets), else the node's physical memory over the ranks on it."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    limit = memory_limit_mb()
    if limit is not None:
        return limit * MB
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return int(physical // max(ranks_on_node, 1))


def choose_strategy(
    cfg: ParallelConfig, model: nn.Module, device: torch.device, world_size: int, ranks_on_node: int
) -> StrategyChoice:
    state = model_state_bytes(model)
    memory = rank_memory_bytes(device, ranks_on_node)
    if cfg.strategy != "auto":
        return StrategyChoice(cfg.strategy, state, memory, "requested")
    if world_size == 1:
        return StrategyChoice("ddp", state, memory, "one rank: there is nothing to shard over")
    if memory is None:
        return StrategyChoice("ddp", state, memory, "the rank's memory is unknown")
    share = f"{cfg.auto_memory_share:.0%} of the rank's {memory / MB:,.0f} MB"
    if state > cfg.auto_memory_share * memory:
        return StrategyChoice("fsdp", state, memory, f"they exceed {share}")
    return StrategyChoice("ddp", state, memory, f"they fit in {share}")


def compile_unavailable(device: torch.device) -> str | None:
    """Why torch.compile cannot work on this node, or None: inductor builds C++ on the CPU
    and Triton kernels on CUDA. The compiler is looked for the way inductor will look for
    it ($CXX, else g++), so a job refused here is one that would have crashed later."""
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "compile: true needs Triton for CUDA kernels, which this node lacks"
        return None
    from torch._inductor import config as inductor_config
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        get_cpp_compiler()
    except InvalidCxxCompiler:
        searched = " or ".join(c for c in inductor_config.cpp.cxx if c is not None)
        return f"compile: true needs a C++ compiler ({searched}) on the node; it has none"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "compile: true needs the Python headers (Python.h) on the node; they are missing"
    return None


def shard_blocks(model: nn.Module, declared: Sequence[nn.Module] | None) -> list[nn.Module]:
    """The recipe's blocks, else the model's top-level children that hold parameters."""
    if declared is not None:
        return list(declared)
    return [child for child in model.children() if any(True for _ in child.parameters())]


@dataclass
class CommTimes:
    """Host seconds inside FSDP's collectives this step. FSDP issues them synchronously on
    gloo, so on the CPU this is all time compute did not hide; on NCCL they run on their own
    streams and this is only the launch."""

    all_gather_s: float = 0.0
    reduce_scatter_s: float = 0.0

    def total(self) -> float:
        return self.all_gather_s + self.reduce_scatter_s

    def reset(self) -> None:
        self.all_gather_s = self.reduce_scatter_s = 0.0


class TimedAllGather(DefaultAllocMixin, AllGather):
    def __init__(self, times: CommTimes) -> None:
        self.times = times

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        async_op: bool = False,
    ) -> dist.Work | None:
        started = time.perf_counter()
        work = dist.all_gather_into_tensor(output_tensor, input_tensor, group, async_op=async_op)
        self.times.all_gather_s += time.perf_counter() - started
        return cast(dist.Work | None, work)


class GuardedReduceScatter(DefaultAllocMixin, ReduceScatter):
    """FSDP's reduce-scatter, counted and timed; on a guard step its first call also reduces
    in fp32, and the relative error over every rank's shard goes to the guard."""

    def __init__(self, state: AllReduceState, times: CommTimes) -> None:
        self.state = state
        self.times = times
        self.checked_step = -1

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> dist.Work | None:
        state = self.state
        started = time.perf_counter()
        state.bytes_this_step += input_tensor.numel() * input_tensor.element_size()
        checking = (
            state.guard_every > 0
            and input_tensor.dtype != torch.float32
            and state.step % state.guard_every == 0
            and self.checked_step != state.step
        )
        reference = None
        if checking:
            self.checked_step = state.step
            reference = torch.empty(
                output_tensor.shape, dtype=torch.float32, device=output_tensor.device
            )
            dist.reduce_scatter_single(
                output=reference, input=input_tensor.float(), op=op, group=group
            )
        work = dist.reduce_scatter_single(
            output=output_tensor,
            input=input_tensor,
            op=op,
            group=group,
            async_op=async_op and not checking,
        )
        if reference is not None:
            squares = torch.stack(
                [(output_tensor.float() - reference).square().sum(), reference.square().sum()]
            )
            dist.all_reduce(squares, group=group)  # every rank judges the whole gradient
            error, norm = squares.sqrt().tolist()
            state.record_error(error / max(norm, torch.finfo(torch.float32).tiny))
        self.times.reduce_scatter_s += time.perf_counter() - started
        return cast(dist.Work | None, work)


class ParallelModel:
    """The model as the loop drives it: `module` runs forward and backward, `model` is the
    recipe's own module (sharded in place under FSDP) for state dicts and evaluation."""

    def __init__(
        self,
        model: nn.Module,
        strategy: str,
        *,
        blocks: Sequence[nn.Module] | None,
        cfg: ParallelConfig,
        precision: str,
        comm: AllReduceState,
        device: torch.device,
    ) -> None:
        self.model = model
        self.strategy = strategy
        self.comm = comm
        self.times = CommTimes()
        units = shard_blocks(model, blocks)
        if cfg.activation_checkpointing == "full":
            units = _checkpoint_activations(model, units)
        if cfg.compile:
            for unit in units:
                unit.compile()
        if strategy == "ddp":
            ddp = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
            attach(ddp, comm)
            self.module: nn.Module = ddp
            self.units: list[FSDPModule] = []
            return
        policy = _policy(precision, comm.dtype)
        for unit in units:
            fully_shard(unit, mp_policy=policy, reshard_after_forward=cfg.reshard_after_forward)
        fully_shard(model, mp_policy=policy, reshard_after_forward=cfg.reshard_after_forward)
        self.units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for sharded in self.units:
            sharded.set_custom_all_gather(TimedAllGather(self.times))
            sharded.set_custom_reduce_scatter(GuardedReduceScatter(comm, self.times))
        self.module = model

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally (all but the last micro-step)."""
        if isinstance(self.module, DistributedDataParallel):
            with self.module.no_sync():
                yield
            return
        for unit in self.units:
            unit.set_requires_gradient_sync(False, recurse=False)
        try:
            yield
        finally:
            for unit in self.units:
                unit.set_requires_gradient_sync(True, recurse=False)

    def set_dtypes(self, precision: str, reduce_dtype: torch.dtype) -> None:
        """After a precision fallback or the guard's switch to fp32: the FSDP units gather
        and reduce in the new dtypes from the next step on."""
        policy = _policy(precision, reduce_dtype)
        for unit in self.units:
            replace_mixed_precision(unit, policy)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on rank 0's CPU (every rank must call it: FSDP
        gathers the shards); None where the model's own `state_dict` is already whole."""
        if self.strategy != "fsdp":
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return cast(dict[str, torch.Tensor], get_model_state_dict(self.model, options=options))

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """The global gradient norm (a plain tensor, the same on every rank), clipped to."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def make_grad_scaler(self, precision: str, device: torch.device) -> torch.amp.GradScaler:
        """fp16 only. Sharded gradients: an overflow may sit in one rank's shard, so the
        sharded scaler agrees on it across ranks before anyone steps."""
        if self.strategy == "fsdp":
            return ShardedGradScaler(device.type, enabled=precision == "fp16")
        return torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def state_bytes_per_rank(self) -> int:
        """Model states this rank holds: a whole replica's, or its shard of them."""
        shards = (
            p.to_local() if isinstance(p, DTensor) else p
            for p in self.model.parameters()
            if p.requires_grad
        )
        return sum(p.numel() for p in shards) * STATE_BYTES_PER_PARAMETER

    def dtypes(self, precision: str) -> dict[str, str]:
        """What each phase runs in, as reported; `frozen_dtype`: what the parameters that
        do not train (a LoRA base) are held in, "none" where every parameter trains."""
        return {
            "strategy": self.strategy,
            "parameters_dtype": "fp32",
            "compute_dtype": precision,
            "gathered_dtype": precision if self.strategy == "fsdp" else "none",
            "reduction_dtype": self.comm.dtype_name,
            "optimizer_state_dtype": "fp32",
            "frozen_dtype": frozen_dtype(self.model),
        }


def frozen_dtype(model: nn.Module) -> str:
    held = {p.dtype for p in model.parameters() if not p.requires_grad and p.is_floating_point()}
    names = {v: k for k, v in DTYPES.items()}
    return "+".join(sorted(names.get(d, str(d).removeprefix("torch.")) for d in held)) or "none"


def hold_frozen_in(model: nn.Module, precision: str) -> None:
    """Parameters that never train (a LoRA base) are held in the compute dtype of a half-
    precision job: autocast would cast them to it for every matmul anyway, so they cost half
    the memory and nothing in accuracy. They get no gradient, so nothing of theirs is ever
    reduced, stepped or scaled. Only where the precision cannot change during the run: a
    fallback to fp32 would meet weights that had already lost their fp32 bits."""
    if precision == "fp32":
        return
    for parameter in model.parameters():
        if not parameter.requires_grad and parameter.is_floating_point():
            parameter.data = parameter.data.to(DTYPES[precision])


def replace_mixed_precision(unit: FSDPModule, policy: MixedPrecisionPolicy) -> None:
    """Gives one FSDP unit another mixed-precision policy, between steps (parameters
    resharded, nothing in flight).

    FSDP2 fixes the policy at `fully_shard` and torch (2.13) has no public way to change it
    (its `set_*` methods cover resharding, gradient sync and custom collectives, not
    dtypes), so this is the one place that reaches into its private state: the state's
    policy (input casts); each parameter group's policy and the dtypes it derives from it;
    and each parameter's all-gather buffers and unsharded parameter, which its first
    all-gather made in the old dtype and reuses (so FSDP makes them again, in the new one).
    test_fsdp_precision_switch.py fails if a torch upgrade moves any of these."""
    state = unit._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    # Assigning to a renamed attribute would not fail, it would change nothing: look first.
    if (
        not hasattr(state, "_mp_policy")
        or groups is None
        or not all(hasattr(g, "mp_policy") and hasattr(g, "_init_mp_dtypes") for g in groups)
        or not all(hasattr(p, "all_gather_outputs") for g in groups for p in g.fsdp_params)
    ):
        raise RuntimeError(
            f"torch {torch.__version__} changed FSDP2's internals: its mixed-precision "
            "policy cannot be replaced after fully_shard (see replace_mixed_precision)"
        )
    state._mp_policy = policy
    for group in groups:
        group.mp_policy = policy
        group._init_mp_dtypes()
        for param in group.fsdp_params:
            param.all_gather_outputs = []
            if hasattr(param, "_unsharded_param"):
                del param._unsharded_param


def _policy(precision: str, reduce_dtype: torch.dtype) -> MixedPrecisionPolicy:
    param_dtype = None if precision == "fp32" else DTYPES[precision]
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)


def _checkpoint_activations(model: nn.Module, units: list[nn.Module]) -> list[nn.Module]:
    """Wraps each unit so backward recomputes its activations; returns the wrappers (the
    FSDP units, so one all-gather serves the recomputation and the backward)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper,
        apply_activation_checkpointing,
    )

    chosen = {id(unit) for unit in units}
    apply_activation_checkpointing(model, check_fn=lambda module: id(module) in chosen)
    return [
        module
        for module in model.modules()
        if isinstance(module, CheckpointWrapper) and id(module._checkpoint_wrapped_module) in chosen
    ]


def peak_memory_bytes(device: torch.device) -> int:
    """Device memory on a GPU; on the CPU the process's peak resident set (Linux: KiB)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
