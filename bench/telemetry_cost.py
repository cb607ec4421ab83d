"""What watching a job costs its training: steps/s with the telemetry and per-step accounting
on vs off, the same model and ranks, modes interleaved round by round.

    python -m bench.telemetry_cost --runs 5 --steps 20 --log-every 10

on:  every `--log-every` step reported (the spec's default is 10; 1 is the worst case):
     phases timed, the report's all_reduce of loss, peak memory and each rank's compute
     time, metrics written by rank 0's record writer; every phase a heartbeat; the
     straggler watch; each step accounted for goodput, a usage record with each report;
     and the node agent's sampler (psutil over the rank processes, at
     AMPFLEET_TELEMETRY_INTERVAL_S) running beside them as it does on a node;
off: no step reported inside the timed window, no heartbeat, no accounting, no sampler.
gpt-bench 23.1M parameters, bf16 compute and AllReduce, 2 gloo ranks (bench/step.py's model).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ampfleet.core.settings import Settings
from ampfleet.workers.launch import threads_per_rank
from ampfleet.workers.rundir import RecordWriter
from ampfleet.workers.telemetry import RankTelemetry
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.recipes.gpt_bench import GPTBenchHyperparameters, build
from ampfleet.workers.training.task import RecipeContext
from bench.step import CPU_MODEL
from tests.support.localranks import run_ranks


def _steps(
    rank: int, world_size: int, watched: bool, steps: int, warmup: int, log_every: int
) -> float:
    torch.set_num_threads(threads_per_rank(world_size))
    torch.manual_seed(0)
    device = torch.device("cpu")
    task = build(
        GPTBenchHyperparameters(**CPU_MODEL, eval_batches=1),
        RecipeContext(rank, world_size, device, 0),
    )
    total = steps + warmup + 1
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        cfg = LoopConfig(
            max_steps=total,
            epochs=None,
            requested_precision="bf16",
            requested_allreduce_dtype="bf16",
            precision="bf16",
            allreduce_dtype="bf16",
            backend="gloo",
            device=device,
            rank=rank,
            world_size=world_size,
            seed=0,
            eval_every_steps=0,
            log_every_steps=log_every if watched else total,
            checkpoint_every_steps=0,
            keep_last_checkpoints=1,
            checkpoint_dir=Path(tmp) / "checkpoints",
            guard_every_steps=0,
            run_dir=run_dir if watched else None,
        )
        writer = RecordWriter(run_dir / "events.jsonl", 0.5) if watched and rank == 0 else None
        trainer = Trainer(task, cfg, writer=writer)
        trainer.batches = trainer.data.micro_batches(start=0)
        try:
            for _ in range(warmup):
                trainer.step_once()
            dist.barrier()
            started = time.perf_counter()
            for _ in range(steps):
                if not watched:
                    trainer.step_once()
                    continue
                with trainer.clock.stepping():  # as Trainer.run accounts each step
                    reported = trainer.step_once()
                if reported:
                    trainer.record_usage()
            dist.barrier()
            return (time.perf_counter() - started) / steps
        finally:
            trainer.comm.close()
            if writer:
                writer.close()


def _sampled(watched: bool, steps: int, warmup: int, log_every: int) -> float:
    """One round; when watched, the agent's sampler runs in this process over the ranks."""
    stop = threading.Event()
    sampler = None
    if watched:
        telemetry = RankTelemetry(os.getpid(), Settings().telemetry_interval_s)

        def sample() -> None:
            step = 0
            while not stop.wait(1.0):  # the agent's pass period
                step += 1
                telemetry.take(step)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
    try:
        step_s = run_ranks(_steps, 2, watched, steps, warmup, log_every, timeout_s=900)[0]
    finally:
        stop.set()
        if sampler:
            sampler.join()
    return float(step_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--log-every", type=int, default=10, help="report every N steps")
    args = parser.parse_args()
    rounds: dict[bool, list[float]] = {False: [], True: []}
    ratios = []
    for index in range(args.runs):
        order = (False, True) if index % 2 == 0 else (True, False)
        seconds = {
            watched: _sampled(watched, args.steps, args.warmup, args.log_every) for watched in order
        }
        for watched, step_s in seconds.items():
            rounds[watched].append(step_s)
        ratios.append(seconds[False] / seconds[True])  # on steps/s over off steps/s
        print(
            f"round {index + 1}: off {1 / seconds[False]:.3f} steps/s, "
            f"on {1 / seconds[True]:.3f} steps/s, on/off {ratios[-1]:.3f}x",
            flush=True,
        )
    off, on = (statistics.median(rounds[w]) for w in (False, True))
    print(
        f"reporting every {args.log_every} steps; "
        f"median of {args.runs} rounds x {args.steps} steps: off {1 / off:.3f} steps/s, "
        f"on {1 / on:.3f} steps/s; on/off, median of the rounds' ratios: "
        f"{statistics.median(ratios):.3f}x (target >= 0.98x)"
    )


if __name__ == "__main__":
    main()
