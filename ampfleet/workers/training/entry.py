"""One rank's process, launched by torchrun: `python -m ampfleet.workers.training.entry RUN_DIR`.

Reads job.json, joins the process group (NCCL on CUDA, gloo on CPU), builds the recipe and
trains. Whatever goes wrong is written to failure-rank<r>.json in words a user can act on;
the process group is always torn down.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from pydantic import Field

from ampfleet.core.recipes import get_recipe
from ampfleet.core.spec import CodeSpec, JobSpec, Stop
from ampfleet.workers.parent_death import die_with_parent
from ampfleet.workers.rank_memory import out_of_memory
from ampfleet.workers.rank_output import capture_output
from ampfleet.workers.rundir import RecordWriter, RunDir
from ampfleet.workers.training.bundled import bundled_recipe
from ampfleet.workers.training.export import RunSummary, export_run
from ampfleet.workers.training.group import leave_process_group, nodes_of_ranks
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.precision import resolve_allreduce_dtype, resolve_precision
from ampfleet.workers.training.task import RecipeContext


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


class StoredCode(CodeSpec):
    """`code` as stored: the API adds the bundle's sha256; a local run (`ampfleet run-local`)
    names its folder instead of a bundle."""

    bundle: str
    sha256: str | None = None


class StoredSpec(JobSpec):
    """The spec as the API stored it in the job file: every default resolved, and what the
    API resolved for the node beside it."""

    code: StoredCode | None = None
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    """An installed recipe's, with every default it has filled in, however many."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    """As the API resolved them; this node's paths are the job file's own `inputs`."""


def run(
    run_dir: RunDir, rank: int, world_size: int, local_rank: int, ranks_on_node: int = 1
) -> None:
    started = time.monotonic()
    job: dict[str, Any] = json.loads(run_dir.job_file.read_text())
    spec = StoredSpec.model_validate(job["spec"])
    device, backend = pick_device(spec.resources.accelerator, local_rank)
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=job["process_group_timeout_s"]),
        device_id=device if device.type == "cuda" else None,
    )
    precision = resolve_precision(spec.precision.value, device)
    allreduce_dtype = resolve_allreduce_dtype(spec.allreduce_dtype.value, precision, backend)
    # Same seed for model init on every rank (DDP broadcasts rank 0's weights anyway);
    # offset by rank afterwards so dropout and augmentation differ per rank.
    seed_everything(spec.seed)
    if spec.code is not None and spec.code.entrypoint is None:
        raise RuntimeError("a job with code.command runs under the script entry (script.py)")
    recipe = (
        bundled_recipe(Path(job["code_dir"]), spec.code.entrypoint)
        if spec.code is not None and spec.code.entrypoint is not None
        else get_recipe(spec.recipe or "")  # a valid spec names one or the other
    )
    # A bundled recipe's hyperparameters meet their model here first (the API never saw it).
    hyperparameters = recipe.hyperparameters.model_validate(spec.hyperparameters)
    run_dir.output_dir.mkdir(parents=True, exist_ok=True)
    context = RecipeContext(
        rank=rank,
        world_size=world_size,
        device=device,
        seed=spec.seed,
        output_dir=run_dir.output_dir,
        inputs={name: Path(path) for name, path in job.get("inputs", {}).items()},
    )
    task = recipe.build(hyperparameters, context)
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
        ranks_on_node=ranks_on_node,
        train_until=train_until(spec.stop, started),
        run_dir=run_dir.path,
        straggler_factor=spec.monitoring.straggler_factor,
        straggler_reports=spec.monitoring.straggler_reports,
        rank_nodes=nodes_of_ranks(job["node"]),
        attempt=int(job.get("attempt") or 1),
    )
    writer = RecordWriter(run_dir.events_file, job["metrics_flush_s"]) if rank == 0 else None
    try:
        trainer = Trainer(task, config, writer, stop_requested=PREEMPT.is_set)
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
            )
            export_run(run_dir, job, trainer.model, summary, writer, gathered=gathered)
            writer.write("finished")
    finally:
        if writer:
            writer.close()


def write_failure(run_dir: RunDir, rank: int, exc: BaseException) -> None:
    memory = out_of_memory(exc)
    run_dir.write_failure(
        rank,
        "OutOfMemory" if memory else type(exc).__name__,
        memory or str(exc),
        "".join(traceback.format_exception(exc)[-3:]),
    )


PREEMPT = threading.Event()
STACKS_SIGNAL = signal.SIGUSR2


def watch_for_preemption() -> None:
    """The node agent preempts with SIGUSR1 (the launcher passes it on): checkpoint at the
    next step, then exit. Installed first thing, before the agent can send it."""
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: PREEMPT.set())


def main(argv: list[str]) -> int:
    die_with_parent()
    watch_for_preemption()
    run_dir = RunDir(Path(argv[1]))
    rank = int(os.environ["RANK"])
    capture_output(run_dir, rank)
    # A stalled attempt's ranks are asked for their stacks before they are stopped: the
    # dump runs in the signal handler itself, so it works while a collective blocks.
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    completed = False
    try:
        run(
            run_dir,
            rank,
            int(os.environ["WORLD_SIZE"]),
            int(os.environ["LOCAL_RANK"]),
            ranks_on_node=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        )
        completed = True
        return 0
    except Exception as exc:
        write_failure(run_dir, rank, exc)
        traceback.print_exc()
        return 1
    finally:
        leave_process_group(completed=completed)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
