"""What `ampfleet.train` buys a script: steps/s of a plain fp32 DDP script against the same
script with the session (bf16 autocast, bf16 gradient AllReduce), beside the built-in loop's
ratio for the same model and modes (bench/step.py's measure), interleaved in one run.

    python -m bench.script_session            # CPU: 2 gloo ranks, a 5M-parameter GPT
    python -m bench.script_session --runs 3 --steps 10

The model is `gpt-bench`'s, its data and loss too; both scripts use AdamW and clip the
gradient norm to 1. Batches are drawn before the timed steps, so the figures are the
steps themselves. Medians over `--runs` rounds of `--steps` timed steps (after `--warmup`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import ampfleet.train
from ampfleet.workers.launch import threads_per_rank
from ampfleet.workers.training.recipes.gpt_bench import GPTBenchHyperparameters, build
from ampfleet.workers.training.task import RecipeContext
from bench.step import _steps as builtin_steps
from tests.support.localranks import run_ranks
from tests.support.training import script_run_folder

MODEL = {
    "d_model": 256,
    "n_layers": 4,
    "n_heads": 4,
    "vocab_size": 4096,
    "block_size": 128,
    "batch_size": 8,
}


def _script(
    rank: int,
    world_size: int,
    mode: str,
    run_dir: str,
    checkpoint_dir: str,
    steps: int,
    warmup: int,
) -> float:
    """Seconds per step of the script: `plain` (DDP, fp32) or `session` (as the job says)."""
    torch.set_num_threads(threads_per_rank(world_size))
    torch.manual_seed(0)
    device = torch.device("cpu")
    task = build(
        GPTBenchHyperparameters(**MODEL, eval_batches=1), RecipeContext(rank, world_size, device, 0)
    )
    loader = DataLoader(task.train_dataset, batch_size=task.batch_size, collate_fn=task.collate_fn)
    batches = [b for b, _ in zip(loader, range(steps + warmup), strict=False)]
    optimizer = torch.optim.AdamW(task.model.parameters(), lr=1e-4)
    if mode == "plain":
        model = DistributedDataParallel(task.model)

        def one_step(batch: Any) -> None:
            task.loss(model, batch).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return _timed(one_step, batches, warmup)
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "AMPFLEET_RUN_DIR": run_dir,
            "AMPFLEET_CHECKPOINT_DIR": checkpoint_dir,
        }
    )
    with ampfleet.train.init() as session:
        prepared, optimizer = session.prepare(task.model, optimizer, grad_clip=1.0)

        def session_step(batch: Any) -> None:
            with session.autocast():
                loss = task.loss(prepared, batch)
            session.backward(loss)
            session.step()

        return _timed(session_step, batches, warmup)


def _timed(one_step: Any, batches: list[Any], warmup: int) -> float:
    for batch in batches[:warmup]:
        one_step(batch)
    dist.barrier()
    started = time.perf_counter()
    for batch in batches[warmup:]:
        one_step(batch)
    dist.barrier()
    return (time.perf_counter() - started) / (len(batches) - warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {k: [] for k in ("plain", "session", "fp32", "bf16")}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for mode in ("plain", "session"):
                folder = script_run_folder(
                    Path(tmp) / f"{run}-{mode}",
                    precision="bf16",
                    allreduce_dtype="bf16",
                    parallelism={"strategy": "ddp"},
                )
                checkpoints = str(Path(tmp) / f"{run}-{mode}" / "checkpoints")
                timed = run_ranks(
                    _script, 2, mode, str(folder.path), checkpoints, args.steps, args.warmup
                )
                figures[mode].append(max(timed))
            for precision in ("fp32", "bf16"):
                result = run_ranks(
                    builtin_steps,
                    2,
                    precision,
                    precision,
                    MODEL,
                    args.steps,
                    args.warmup,
                    False,
                    timeout_s=600,
                )[0]
                figures[precision].append(result["step_s"])
    step_s = {k: statistics.median(v) for k, v in figures.items()}
    print(
        f"gpt-bench {MODEL['d_model']}x{MODEL['n_layers']} on CPU, 2 gloo ranks; median of "
        f"{args.runs} runs x {args.steps} steps"
    )
    print(f"{'':>34} {'fp32 steps/s':>12} {'bf16+bf16 steps/s':>17} {'ratio':>6}")
    for name, fp32, bf16 in (
        ("script: plain DDP vs session", "plain", "session"),
        ("built-in loop (bench/step.py)", "fp32", "bf16"),
    ):
        print(
            f"{name:>34} {1 / step_s[fp32]:>12.3f} {1 / step_s[bf16]:>17.3f} "
            f"{step_s[fp32] / step_s[bf16]:>5.2f}x"
        )


if __name__ == "__main__":
    main()
