"""Peak memory per rank of one `gpt-bench` under DDP fp32, DDP bf16 and FSDP bf16, side by side.

    python -m bench.memory                 # 2 gloo ranks, a 110M-parameter GPT
    python -m bench.memory --steps 3 --d-model 768 --layers 12
    python -m bench.memory --steps 2 --d-model 1024 --layers 22 --modes ddp:fp32,fsdp:bf16 --runs 3

Each mode runs in fresh rank processes through ampfleet's own Trainer (the same wrapping,
autocast, hooks and optimizer a job gets) for `--steps` optimizer steps; the figure is each
rank's peak resident memory (ru_maxrss) as the job reports it, and the largest over ranks is
compared with the first mode's (DDP fp32 unless `--modes` says otherwise); with `--runs`,
medians of interleaved rounds. Beside it, the floor of the model states alone: 16 bytes per
parameter (fp32 weights, gradients, two AdamW moments), divided by the world size under
FSDP, plus what an idle rank holds (the interpreter, torch and gloo: measured in the same
process before the model is built).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from ampfleet.recipes.gpt_bench import GPTBenchHyperparameters
from ampfleet.workers.rank_memory import apply_memory_limit
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import MB, STATE_BYTES_PER_PARAMETER, ParallelConfig
from ampfleet.workers.training.recipes.gpt_bench import build
from ampfleet.workers.training.task import RecipeContext
from tests.support.localranks import run_ranks

MODES = [("ddp", "fp32"), ("ddp", "bf16"), ("fsdp", "bf16")]


def gpt_bench_model(d_model: int, layers: int, vocab: int) -> dict[str, Any]:
    """gpt-bench's hyperparameters for one size: 2 sequences of 128 tokens per rank."""
    return {
        "d_model": d_model,
        "n_layers": layers,
        "n_heads": 12 if d_model % 12 == 0 else 8,
        "vocab_size": vocab,
        "block_size": 128,
        "batch_size": 2,
    }


def train_and_measure(
    rank: int,
    world_size: int,
    strategy: str,
    precision: str,
    model: dict[str, Any],
    steps: int,
    memory_limit_mb: int | None = None,
) -> dict[str, float]:
    """One rank: `steps` optimizer steps of the model; its peak memory and parameters.
    With `memory_limit_mb`, the rank's memory is capped the way the launcher caps a job's
    slot (RLIMIT_DATA) before the model is built."""
    if memory_limit_mb is not None:
        apply_memory_limit(memory_limit_mb)
    idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.manual_seed(0)
    task = build(
        GPTBenchHyperparameters(**model, eval_batches=1),
        RecipeContext(rank, world_size, torch.device("cpu"), 0),
    )
    parameters = sum(p.numel() for p in task.model.parameters())
    resident = {"built": resident_mb()}
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
        resident["wrapped"] = resident_mb()
        trainer.batches = trainer.data.micro_batches(start=0)
        try:
            for step in range(steps):
                reported = trainer.step_once()
                resident["step 1" if step == 0 else "last step"] = resident_mb()
        finally:
            trainer.comm.close()
    return {
        "peak_mb": reported["peak_memory_mb"],
        "idle_mb": idle / MB,
        "parameters": float(parameters),
        "step_s": reported["step_time_s"],
        **{f"resident {phase}": mb for phase, mb in resident.items()},
    }


def resident_mb() -> float:
    """This process's resident memory now (VmRSS), in MB: what it holds between phases,
    where ru_maxrss says only the peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / MB
    raise RuntimeError("no VmRSS in /proc/self/status")


def larger_rank(ranks: list[dict[str, float]]) -> dict[str, float]:
    """Rank 0's figures, each memory figure the larger over ranks (as a job reports its peak:
    rank 0's report carries the maximum over ranks)."""
    return {
        key: max(rank[key] for rank in ranks) if key.startswith("resident") else value
        for key, value in ranks[0].items()
    }


def _mode(text: str) -> tuple[str, str]:
    strategy, _, precision = text.partition(":")
    if (strategy, precision) not in MODES:
        raise argparse.ArgumentTypeError(f"{text}: choose from {', '.join(map(':'.join, MODES))}")
    return strategy, precision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--runs", type=int, default=1, help="interleaved rounds; medians")
    parser.add_argument(
        "--cap-mb",
        type=int,
        default=None,
        help="cap each rank (RLIMIT_DATA) so that a mode outgrowing a shared host fails "
        "its own allocation instead",
    )
    parser.add_argument(
        "--modes",
        type=lambda text: [_mode(m) for m in text.split(",")],
        default=MODES,
        help="strategy:compute pairs, the first the baseline (default: all three)",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="also the larger rank's resident memory after the model is built, wrapped "
        "(sharded under FSDP), after the first step and after the last",
    )
    args = parser.parse_args()
    model = gpt_bench_model(args.d_model, args.layers, args.vocab)
    modes: list[tuple[str, str]] = args.modes
    runs: dict[tuple[str, str], list[dict[str, float]]] = {mode: [] for mode in modes}
    for _ in range(args.runs):
        for mode in modes:
            ranks = run_ranks(
                train_and_measure,
                args.ranks,
                *mode,
                model,
                args.steps,
                args.cap_mb,
                timeout_s=1800,
            )
            runs[mode].append(larger_rank(ranks))
    first = runs[modes[0]][0]
    parameters, idle = first["parameters"], first["idle_mb"]
    print(
        f"gpt-bench {parameters / 1e6:.1f}M parameters, {args.ranks} gloo ranks, "
        f"{args.steps} steps of 2 x 128 tokens per rank; idle rank {idle:,.0f} MB; "
        f"median of {args.runs} run(s) per mode"
    )
    peaks = {mode: [r["peak_mb"] for r in results] for mode, results in runs.items()}
    baseline = statistics.median(peaks[modes[0]])
    print(
        f"{'strategy':>8} {'compute':>7} {'peak MB/rank':>12} {'range':>13} "
        f"{'vs first':>8} {'floor MB':>9}"
    )
    for strategy, precision in modes:
        measured = peaks[(strategy, precision)]
        peak = statistics.median(measured)
        spread = f"{min(measured):,.0f}-{max(measured):,.0f}"
        shards = args.ranks if strategy == "fsdp" else 1
        floor = idle + parameters * STATE_BYTES_PER_PARAMETER / shards / MB
        print(
            f"{strategy:>8} {precision:>7} {peak:>12,.0f} {spread:>13} "
            f"{peak / baseline:>7.2f}x {floor:>9,.0f}"
        )
    if args.phases:
        phases = [key for key in runs[modes[0]][0] if key.startswith("resident ")]
        print("resident MB of the larger rank, median:")
        print(f"{'strategy':>8} {'compute':>7} " + " ".join(f"{p[9:]:>10}" for p in phases))
        for mode, results in runs.items():
            values = [statistics.median(r[p] for r in results) for p in phases]
            print(f"{mode[0]:>8} {mode[1]:>7} " + " ".join(f"{v:>10,.0f}" for v in values))


if __name__ == "__main__":
    main()
