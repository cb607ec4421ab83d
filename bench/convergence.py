"""Final validation metrics under bf16 and fp16 against fp32, fixed seeds, 2 gloo ranks.

    python -m bench.convergence [--digits-steps 300] [--charlm-steps 400]

Each half-precision run uses the matching half-precision AllReduce (our ring on gloo).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ampfleet.core.recipes import get_recipe
from ampfleet.workers.launch import threads_per_rank
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.task import RecipeContext
from tests.support.localranks import run_ranks

CHARLM = {
    "d_model": 128,
    "n_layers": 4,
    "n_heads": 4,
    "block_size": 128,
    "batch_size": 16,
    "max_chars": 1_000_000,
    "eval_batches": 20,
}
PRECISIONS = ("fp32", "bf16", "fp16")


def _train(
    rank: int,
    world_size: int,
    recipe: str,
    hyperparameters: dict[str, Any],
    precision: str,
    steps: int,
) -> dict[str, float]:
    torch.set_num_threads(threads_per_rank(world_size))
    torch.manual_seed(0)
    definition = get_recipe(recipe)
    task = definition.build(
        definition.hyperparameters(**hyperparameters),
        RecipeContext(rank, world_size, torch.device("cpu"), 0),
    )
    torch.manual_seed(rank)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LoopConfig(
            max_steps=steps,
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
            log_every_steps=steps,
            checkpoint_every_steps=0,
            keep_last_checkpoints=1,
            checkpoint_dir=Path(tmp),
        )
        started = time.perf_counter()
        result = Trainer(task, cfg, writer=None).run()
        result["wall_s"] = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--digits-steps", type=int, default=300)
    parser.add_argument("--charlm-steps", type=int, default=400)
    args = parser.parse_args()
    cases = [
        ("digits", {}, args.digits_steps, "val_accuracy"),
        ("charlm", CHARLM, args.charlm_steps, "val_bits_per_char"),
    ]
    print(
        f"{'recipe':>7} {'metric':>18} {'fp32':>8} {'bf16':>8} {'fp16':>8} "
        f"{'bf16 vs fp32':>13} {'fp16 vs fp32':>13}"
    )
    for recipe, hyperparameters, steps, metric in cases:
        values = {
            p: run_ranks(_train, 2, recipe, hyperparameters, p, steps, timeout_s=1800)[0]
            for p in PRECISIONS
        }
        base = values["fp32"][metric]
        print(
            f"{recipe:>7} {metric:>18} "
            + " ".join(f"{values[p][metric]:>8.4f}" for p in PRECISIONS)
            + " ".join(f" {(values[p][metric] - base) / base:>+12.2%}" for p in PRECISIONS[1:])
            + f"   ({steps} steps; wall s: "
            + ", ".join(f"{p} {values[p]['wall_s']:.0f}" for p in PRECISIONS)
            + ")"
        )


if __name__ == "__main__":
    main()
