"""One NCCL rank on the first GPU (the `nccl` fixture, one per test module that imports it;
it skips where no CUDA device exists) and the digits Trainer on it (`digits_trainer`), for
the CUDA tests. Nothing here needs a service fixture, so those modules still run with
`pytest --noconftest` on a bare GPU host."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ampfleet.workers.rundir import RecordWriter
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.precision import resolve_allreduce_dtype, resolve_precision
from ampfleet.workers.training.recipes.digits import DigitsHyperparameters, build
from ampfleet.workers.training.task import RecipeContext


@pytest.fixture(scope="module")
def nccl() -> Iterator[torch.device]:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(
            "nccl", init_method=f"file://{tmp}/init", rank=0, world_size=1, device_id=device
        )
        yield device
        dist.destroy_process_group()


def digits_trainer(device: torch.device, precision: str, out: Path, steps: int) -> Trainer:
    torch.manual_seed(0)
    task = build(DigitsHyperparameters(), RecipeContext(0, 1, device, 0))
    cfg = LoopConfig(
        max_steps=steps,
        epochs=None,
        requested_precision=precision,
        requested_allreduce_dtype="auto",
        precision=resolve_precision(precision, device),
        allreduce_dtype=resolve_allreduce_dtype(
            "auto", resolve_precision(precision, device), "nccl"
        ),
        backend="nccl",
        device=device,
        rank=0,
        world_size=1,
        seed=0,
        eval_every_steps=0,
        log_every_steps=1,
        checkpoint_every_steps=0,
        keep_last_checkpoints=1,
        checkpoint_dir=out / "checkpoints",
    )
    return Trainer(task, cfg, RecordWriter(out / "events.jsonl", 0.0))
