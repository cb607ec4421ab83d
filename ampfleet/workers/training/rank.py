"""One rank's training run, once its recipe resolved (training/entry.py): join the process
group (NCCL on CUDA, gloo on CPU), build the recipe, train, export. Whatever raises is the
entry point's to report; it also tears the process group down."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ampfleet.core.spec import Stop
from ampfleet.workers.rundir import RecordWriter, RunDir
from ampfleet.workers.start_phases import StartClock
from ampfleet.workers.training.export import RunSummary, export_run
from ampfleet.workers.training.group import nodes_of_ranks
from ampfleet.workers.training.initial import Initial
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.precision import resolve_allreduce_dtype, resolve_precision
from ampfleet.workers.training.task import RecipeContext

if TYPE_CHECKING:  # entry.py runs as __main__: importing it here would load it twice
    from ampfleet.workers.training.entry import ResolvedJob


@dataclass(frozen=True)
class RankPlace:
    """Where this process stands in the job, as torchrun numbered it."""

    rank: int
    world_size: int
    local_rank: int
    ranks_on_node: int = 1


def pick_device(accelerator: str, local_rank: int) -> tuple[torch.device, str]:
    if accelerator != "cpu" and torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    if accelerator == "cuda":
        raise RuntimeError("the job asked for CUDA but this node has no usable GPU")
    return torch.device("cpu"), "gloo"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def train_until(stop: Stop, started: float) -> float | None:
    """A runtime-only job trains until its time is up, counted from the rank's start (the
    node agent's own limit, a grace later, counts from the launch just before). With steps
    or epochs, max_runtime_s is a limit the agent enforces (TIMED_OUT), not a goal."""
    if stop.runtime_only and stop.max_runtime_s is not None:
        return started + stop.max_runtime_s
    return None


def train(
    run_dir: RunDir,
    resolved: ResolvedJob,
    place: RankPlace,
    *,
    started: float,
    stop_requested: Callable[[], bool],
    clock: StartClock | None = None,
) -> None:
    """`clock`: the start's phases so far; the rendezvous is noted here, the rest by the
    loop (rank 0 reports them after its first step)."""
    job, spec, recipe = resolved.job, resolved.spec, resolved.recipe
    rank, world_size = place.rank, place.world_size
    device, backend = pick_device(spec.resources.accelerator, place.local_rank)
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=job["process_group_timeout_s"]),
        device_id=device if device.type == "cuda" else None,
    )
    if clock is not None:
        clock.mark("rendezvous")
    precision = resolve_precision(spec.precision.value, device)
    allreduce_dtype = resolve_allreduce_dtype(spec.allreduce_dtype.value, precision, backend)
    # Same seed for model init on every rank (DDP broadcasts rank 0's weights anyway);
    # offset by rank afterwards so dropout and augmentation differ per rank.
    seed_everything(spec.seed)
    run_dir.output_dir.mkdir(parents=True, exist_ok=True)
    context = RecipeContext(
        rank=rank,
        world_size=world_size,
        device=device,
        seed=spec.seed,
        output_dir=run_dir.output_dir,
        inputs=resolved.inputs,
        export_dtype=spec.export.dtype,
    )
    task = recipe.build(resolved.hyperparameters, context)
    seed_everything(spec.seed + rank)
    config = LoopConfig(
        max_steps=spec.stop.max_steps,
        epochs=spec.stop.epochs,
        requested_precision=spec.precision.value,
        requested_allreduce_dtype=spec.allreduce_dtype.value,
        precision=precision,
        allreduce_dtype=allreduce_dtype,
        backend=backend,
        device=device,
        rank=rank,
        world_size=world_size,
        seed=spec.seed,
        eval_every_steps=spec.eval_every_steps,
        log_every_steps=spec.log_every_steps,
        checkpoint_every_steps=spec.checkpoint.every_steps,
        keep_last_checkpoints=spec.checkpoint.keep_last,
        checkpoint_dir=Path(job["checkpoint_dir"]),
        parallel=ParallelConfig.from_spec(spec.parallelism),
        ranks_on_node=place.ranks_on_node,
        train_until=train_until(spec.stop, started),
        run_dir=run_dir.path,
        straggler_factor=spec.monitoring.straggler_factor,
        straggler_reports=spec.monitoring.straggler_reports,
        straggler_sustained_s=spec.monitoring.straggler_sustained_s,
        rank_nodes=nodes_of_ranks(job["node"]),
        attempt=int(job.get("attempt") or 1),
        initial=Initial.of_job(job),
    )
    writer = RecordWriter(run_dir.events_file, job["metrics_flush_s"]) if rank == 0 else None
    try:
        trainer = Trainer(task, config, writer, stop_requested=stop_requested, start=clock)
        metrics = trainer.run()
        # Every rank, in step (the ranks agreed on stopping): FSDP gathers the shards.
        gathered = None if trainer.preempted else trainer.parallel.full_state_dict()
        if writer and not trainer.preempted:
            # Before "finished": the model is listed by the time the job is SUCCEEDED.
            summary = RunSummary(
                step=trainer.step,
                metrics=metrics,
                precision=trainer.precision,
                allreduce_dtype=trainer.comm.dtype_name,
                world_size=world_size,
                backend=backend,
                hyperparameters=resolved.hyperparameters.model_dump(mode="json"),
            )
            export_run(
                run_dir,
                job,
                trainer.model,
                summary,
                writer,
                gathered=gathered,
                recipe_export=task.export,
            )
            writer.write("finished")
    finally:
        if writer:
            writer.close()
