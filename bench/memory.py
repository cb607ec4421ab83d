"""Peak memory per rank of one `gpt-bench` under DDP fp32, DDP bf16 and FSDP bf16, side by side.

    python -m bench.memory                 # 2 gloo ranks, a 110M-parameter GPT
    python -m bench.memory --steps 3 --d-model 768 --layers 12

Each mode runs in fresh rank processes through ampfleet's own Trainer (the same wrapping,
autocast, hooks and optimizer a job gets) for `--steps` optimizer steps; the figure is each
rank's peak resident memory (ru_maxrss) as the job reports it, and the largest over ranks is
compared with DDP fp32. Beside it, the floor of the model states alone: 16 bytes per
parameter (fp32 weights, gradients, two AdamW moments), divided by the world size under
FSDP, plus what an idle rank holds (the interpreter, torch and gloo: measured in the same
process before the model is built).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path
from typing import Any

import torch

from ampfleet.recipes.gpt_bench import GPTBenchHyperparameters
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import MB, STATE_BYTES_PER_PARAMETER, ParallelConfig
from ampfleet.workers.training.recipes.gpt_bench import build
from ampfleet.workers.training.task import RecipeContext
from tests.support.localranks import run_ranks

MODES = [("ddp", "fp32"), ("ddp", "bf16"), ("fsdp", "bf16")]


def _peak(
    rank: int, world_size: int, strategy: str, precision: str, model: dict[str, Any], steps: int
) -> dict[str, float]:
    idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.manual_seed(0)
    task = build(
        GPTBenchHyperparameters(**model, eval_batches=1),
        RecipeContext(rank, world_size, torch.device("cpu"), 0),
    )
    parameters = sum(p.numel() for p in task.model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LoopConfig(
            max_steps=steps + 1,
            epochs=None,
            requested_precision=precision,
            requested_allreduce_dtype=precision,
            precision=precision,
            allreduce_dtype=precision,
            backend="gloo",
            device=torch.device("cpu"),
            rank=rank,
            world_size=world_size,
            seed=0,
            eval_every_steps=0,
            log_every_steps=1,
            checkpoint_every_steps=0,
            keep_last_checkpoints=1,
            checkpoint_dir=Path(tmp),
            guard_every_steps=0,
            parallel=ParallelConfig(strategy=strategy),
        )
        trainer = Trainer(task, cfg, writer=None)
        trainer.batches = trainer.micro_batches(start=0)
        try:
            for _ in range(steps):
                reported = trainer.step_once()
        finally:
            trainer.comm.close()
    return {
        "peak_mb": reported["peak_memory_mb"],
        "idle_mb": idle / MB,
        "parameters": float(parameters),
        "step_s": reported["step_time_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args()
    model = {
        "d_model": args.d_model,
        "n_layers": args.layers,
        "n_heads": 12 if args.d_model % 12 == 0 else 8,
        "vocab_size": args.vocab,
        "block_size": 128,
        "batch_size": 2,
    }
    results = {
        mode: run_ranks(_peak, args.ranks, *mode, model, args.steps, timeout_s=1800)[0]
        for mode in MODES
    }
    first = results[MODES[0]]
    parameters, idle = first["parameters"], first["idle_mb"]
    print(
        f"gpt-bench {parameters / 1e6:.1f}M parameters, {args.ranks} gloo ranks, "
        f"{args.steps} steps of 2 x 128 tokens per rank; idle rank {idle:,.0f} MB"
    )
    baseline = first["peak_mb"]
    print(
        f"{'strategy':>8} {'compute':>7} {'peak MB/rank':>12} {'vs DDP fp32':>11} {'floor MB':>9}"
    )
    for strategy, precision in MODES:
        peak = results[(strategy, precision)]["peak_mb"]
        shards = args.ranks if strategy == "fsdp" else 1
        floor = idle + parameters * STATE_BYTES_PER_PARAMETER / shards / MB
        print(
            f"{strategy:>8} {precision:>7} {peak:>12,.0f} {peak / baseline:>10.2f}x {floor:>9,.0f}"
        )


if __name__ == "__main__":
    main()
