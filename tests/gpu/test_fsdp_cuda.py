"""FSDP2 with a bf16 MixedPrecisionPolicy on NCCL: one device, and every device of the host
when it has several. Marked `gpu`: skipped where no CUDA device exists. Self-contained (no
service fixtures), so it also runs with `pytest --noconftest` on a bare GPU host."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.multiprocessing import spawn  # type: ignore[attr-defined]

from ampfleet.recipes.gpt_bench import GPTBenchHyperparameters
from ampfleet.workers.rundir import RecordReader, RecordWriter
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.recipes.gpt_bench import build
from ampfleet.workers.training.task import RecipeContext

pytestmark = pytest.mark.gpu

MODEL = {"d_model": 256, "n_layers": 4, "n_heads": 4, "vocab_size": 512, "block_size": 64}


def _train(rank: int, world_size: int, init: str, out: str) -> None:
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl", init_method=f"file://{init}", rank=rank, world_size=world_size, device_id=device
    )
    try:
        torch.manual_seed(0)
        task = build(
            GPTBenchHyperparameters(**MODEL, batch_size=8, eval_batches=2),
            RecipeContext(rank, world_size, device, 0),
        )
        cfg = LoopConfig(
            max_steps=30,
            epochs=None,
            requested_precision="bf16",
            requested_allreduce_dtype="bf16",
            precision="bf16",
            allreduce_dtype="bf16",
            backend="nccl",
            device=device,
            rank=rank,
            world_size=world_size,
            seed=0,
            eval_every_steps=0,
            log_every_steps=5,
            checkpoint_every_steps=10,
            keep_last_checkpoints=2,
            checkpoint_dir=Path(out) / "checkpoints",
            guard_every_steps=5,
            parallel=ParallelConfig(strategy="fsdp"),
        )
        writer = RecordWriter(Path(out) / "events.jsonl", 0.0) if rank == 0 else None
        trainer = Trainer(task, cfg, writer)
        trainer.run()
        if writer is not None:
            writer.close()
    finally:
        dist.destroy_process_group()


def _records(world_size: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        spawn(_train, args=(world_size, f"{tmp}/init", tmp), nprocs=world_size, join=True)
        return RecordReader(Path(tmp) / "events.jsonl").read_new()


@pytest.mark.parametrize("world_size", [1, 2])
def test_fsdp_bf16_trains_on_nccl(world_size: int) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.device_count() < world_size:
        pytest.skip(f"needs {world_size} CUDA devices")
    records = _records(world_size)
    started = next(r for r in records if r["kind"] == "started")
    assert (started["strategy"], started["gathered_dtype"]) == ("fsdp", "bf16")
    losses = [r["values"] for r in records if r["kind"] == "metrics" and "loss" in r["values"]]
    assert losses[-1]["loss"] < losses[0]["loss"]
    assert losses[-1]["peak_memory_mb_rank0"] > 0
    if world_size > 1:
        assert "allreduce_relative_error" in losses[-1]
    assert [r["step"] for r in records if r["kind"] == "artifact"] == [10, 20, 30]
