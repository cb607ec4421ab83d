"""Run the real Trainer on spawned gloo ranks with a recipe whose loss can be rigged."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ampfleet.core.recipes import get_recipe
from ampfleet.core.spec import JobSpec
from ampfleet.workers.rundir import RecordReader, RecordWriter, RunDir
from ampfleet.workers.training.initial import Initial
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.task import RecipeContext

SMALL_CHARLM = {
    "d_model": 64,
    "n_layers": 2,
    "n_heads": 4,
    "block_size": 64,
    "batch_size": 16,
    "max_chars": 400_000,
    "eval_batches": 10,
}
"""charlm hyperparameters small enough for tests on CPU gloo ranks: 2 layers, 64 wide, at most
400,000 characters of text."""


class RiggedLoss:
    """Counts loss calls (one per step without accumulation) and rigs chosen ones."""

    def __init__(
        self,
        inner: Any,
        *,
        inf_calls: range | None = None,
        crash_call: int | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.inner = inner
        self.delay_s = delay_s
        self.inf_calls = inf_calls or range(0)
        self.crash_call = crash_call
        self.calls = 0

    def __call__(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        call = self.calls
        self.calls += 1
        if call == self.crash_call:
            raise RuntimeError(f"injected crash at loss call {call}")
        if self.delay_s:
            time.sleep(self.delay_s)  # a slower device: more compute time in forward
        loss: torch.Tensor = self.inner(model, batch)
        return loss * float("inf") if call in self.inf_calls else loss


def train_recipe(
    rank: int,
    world_size: int,
    out_dir: str,
    *,
    recipe: str = "digits",
    eval_every: int = 0,
    precision: str,
    requested_precision: str | None = None,
    allreduce_dtype: str = "fp32",
    requested_allreduce_dtype: str | None = None,
    max_steps: int | None = 30,
    runtime_s: float | None = None,
    checkpoint_every: int = 0,
    keep_last: int = 3,
    checkpoint_dir: str | None = None,
    inf_calls: tuple[int, int] | None = None,
    crash_call: int | None = None,
    hyperparameters: dict[str, Any] | None = None,
    seed: int = 0,
    flush_s: float = 0.0,
    stop_requested: Callable[[], bool] | None = None,
    strategy: str = "ddp",
    parallelism: dict[str, Any] | None = None,
    guard_every: int = 50,
    checkpoint_writer: Callable[[Path], Any] | None = None,
    profiles: bool = False,
    in_run_dir: bool = False,
    slow_rank: tuple[int, float] | None = None,
    monitoring: dict[str, Any] | None = None,
    attempt: int = 1,
    task_options: dict[str, Any] | None = None,
    initial: Initial | None = None,
) -> dict[str, Any]:
    """One rank's run; rank 0's records land in out_dir/events.jsonl. `runtime_s` with
        `max_steps=None`: a runtime-only job, training that long from here. `parallelism`: the
        spec's other options beside the strategy (activation checkpointing, compile).
        `profiles`: out_dir is also the run folder profile requests arrive in; `in_run_dir`: out_dir
        is the run folder (the ranks beat there). `slow_rank`: (rank, seconds) added to each of
        that rank's forward passes. `monitoring`: LoopConfig's straggler fields. `attempt`: the
    job's attempt the run stands for. `checkpoint_dir`: the job's checkpoint folder (default:
    out_dir/checkpoints). `task_options`: fields of the built TrainingTask to replace.
    `initial`: another job's checkpoint to start from (`init_from`)."""
    torch.manual_seed(seed)
    definition = get_recipe(recipe)
    task = definition.build(
        definition.hyperparameters(**(hyperparameters or {})),
        RecipeContext(rank, world_size, torch.device("cpu"), seed),
    )
    for name, value in (task_options or {}).items():
        setattr(task, name, value)
    task.loss = RiggedLoss(
        task.loss,
        inf_calls=range(*inf_calls) if inf_calls else None,
        crash_call=crash_call,
        delay_s=slow_rank[1] if slow_rank and slow_rank[0] == rank else 0.0,
    )
    torch.manual_seed(seed + rank)
    cfg = LoopConfig(
        max_steps=max_steps,
        epochs=None,
        requested_precision=requested_precision or precision,
        requested_allreduce_dtype=requested_allreduce_dtype or allreduce_dtype,
        precision=precision,
        allreduce_dtype=allreduce_dtype,
        backend="gloo",
        device=torch.device("cpu"),
        rank=rank,
        world_size=world_size,
        seed=seed,
        eval_every_steps=eval_every,
        log_every_steps=1,
        checkpoint_every_steps=checkpoint_every,
        keep_last_checkpoints=keep_last,
        checkpoint_dir=Path(checkpoint_dir or Path(out_dir) / "checkpoints"),
        guard_every_steps=guard_every,
        parallel=ParallelConfig(strategy=strategy, **(parallelism or {})),
        train_until=None if runtime_s is None else time.monotonic() + runtime_s,
        run_dir=Path(out_dir) if profiles or in_run_dir else None,
        attempt=attempt,
        initial=initial,
        # The production rule (a gap sustained for a minute) unless a test asks otherwise:
        # two healthy ranks sharing this loaded machine's cores must not be named.
        **(monitoring or {}),
    )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    writer = RecordWriter(Path(out_dir) / "events.jsonl", flush_s) if rank == 0 else None
    try:
        trainer = Trainer(task, cfg, writer, stop_requested)
        if checkpoint_writer is not None:
            trainer.checkpoints.storage_writer = checkpoint_writer
        return trainer.run()
    finally:
        if writer:
            writer.close()


def records(out_dir: Path) -> list[dict[str, Any]]:
    """The run's records as the node agent reads them; every one the engine wrote must
    pass the agent's schema (a rejected one would be lost on a real node)."""
    reader = RecordReader(out_dir / "events.jsonl")
    found = reader.read_new()
    assert reader.rejected == [], reader.rejected
    return found


def losses(out_dir: Path) -> dict[int, float]:
    return {
        r["step"]: r["values"]["loss"]
        for r in records(out_dir)
        if r["kind"] == "metrics" and "loss" in r["values"]
    }


def dump(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)


def script_run_folder(
    root: Path, attempt: int = 1, init_from: dict[str, Any] | None = None, **spec: Any
) -> RunDir:
    """An attempt's run folder as the node agent prepares it for a script, with the job's
    stored spec (`spec`: the fields to set); its checkpoints go to root/checkpoints.
    `init_from`: the job file's, as the agent writes it (initial_checkpoint.for_ranks)."""
    submitted = JobSpec.model_validate(
        {
            # A bundle's code; what it runs does not matter to the session.
            "code": {"bundle": "bnd_" + "a" * 26, "entrypoint": "train:main"},
            "resources": {"accelerator": "cpu"},
            "log_every_steps": 1,
            **spec,
        }
    )
    run_dir = RunDir.for_attempt(root / "runs", "job_script", attempt, 0)
    run_dir.path.mkdir(parents=True)
    job = {
        "job_id": "job_script",
        "attempt": attempt,
        "spec": submitted.model_dump(mode="json"),
        "checkpoint_dir": str(root / "checkpoints"),
        "process_group_timeout_s": 60,
        "metrics_flush_s": 0.0,
        "inputs": {},
        "node": "node-a",
        **({"init_from": init_from} if init_from else {}),
    }
    run_dir.job_file.write_text(json.dumps(job))
    return run_dir
