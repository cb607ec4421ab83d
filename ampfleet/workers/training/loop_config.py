"""What one rank's run is, as the entry point resolved it from the job spec and the node:
the loop's (loop.py) whole configuration, in one typed place."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ampfleet.workers.training.initial import Initial
from ampfleet.workers.training.parallel import ParallelConfig


@dataclass(frozen=True)
class LoopConfig:
    """One rank's run, as the entry point resolved it from the job spec and the node."""

    max_steps: int | None
    """Optimizer steps to take; None leaves the end to `epochs` (or to `train_until`)."""
    epochs: int | None
    """Passes over the training set; with `max_steps` too, whichever ends first."""
    requested_precision: str
    """As the spec asked: auto | fp16 | bf16 | fp32. Only `auto` falls back."""
    requested_allreduce_dtype: str
    """As the spec asked; `auto` follows the compute precision, through a fallback too."""
    precision: str
    """The compute precision the run starts in, resolved for this device."""
    allreduce_dtype: str
    """The reduction dtype the run starts in, resolved for the precision and backend."""
    backend: str
    """The process group's: nccl on CUDA, gloo on the CPU."""
    device: torch.device
    rank: int
    world_size: int
    seed: int
    """Seeds the data order: the sampler's shuffle and the loader's own generator."""
    eval_every_steps: int
    """Evaluate every N steps; 0 evaluates only at the end."""
    log_every_steps: int
    """Report a step's metrics every N steps; the last step is always reported."""
    checkpoint_every_steps: int
    """Checkpoint every N steps; 0 checkpoints only at the end and when preempted."""
    keep_last_checkpoints: int
    """Complete checkpoints kept; publishing one deletes the oldest beyond these."""
    checkpoint_dir: Path
    """The job's checkpoints, shared by its attempts: a run resumes from the latest."""
    guard_every_steps: int = 50
    """Every N steps one bucket is also reduced in fp32 to measure the half-precision
    reduction's error; 0 never checks."""
    guard_threshold: float = 1e-2
    """The relative error past which the guard switches the reduction to fp32."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """DDP or FSDP, and how (resharding, activation checkpointing, compile)."""
    ranks_on_node: int = 1
    """Ranks sharing this node's memory: what `auto` strategy weighs the model against."""
    train_until: float | None = None
    """A runtime-only job: the `time.monotonic()` after which the ranks agree to stop (at
    the next stop check) and finish the run; its learning rate decays over that time."""
    run_dir: Path | None = None
    """The attempt's run folder: profile requests arrive there and their traces are written
    there (profiling.py), and the rank beats there (heartbeat.py). None: neither."""
    straggler_factor: float = 1.5
    straggler_reports: int = 3
    straggler_sustained_s: float = 60.0
    """A rank this many times slower than the others' median for this many reported steps
    in a row, spanning at least these seconds, is a straggler (stragglers.py)."""
    rank_nodes: tuple[str, ...] = ()
    """The node each rank runs on, by rank, where the agent said."""
    attempt: int = 1
    """The job's attempt this run is (1: its first); a restart that cannot keep what an
    earlier attempt measured says so."""
    initial: Initial | None = None
    """Another job's checkpoint to start from while this job has none (`init_from`)."""
