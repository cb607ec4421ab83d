"""DDP training steps/s of `gpt-bench` under each precision setup, side by side in one run.

    python -m bench.step                  # CPU: 2 gloo ranks, 23M-parameter GPT
    python -m bench.step --gpu            # one CUDA device, 135M-parameter GPT
    python -m bench.step --strategy compare   # bf16 under DDP and under FSDP, side by side
    python -m bench.step --link 1gbit     # 2 hosts x 1 rank of the network bed, 1 Gbit/s

CPU modes: fp32 | bf16 autocast (fp32 AllReduce) | bf16 autocast + bf16 AllReduce.
With `--link`, rank r runs inside host r of a network bed (tests/support/netbed.py) and the
gradients cross a tbf-shaped link of that rate; beside each mode, the bytes a rank sent per
step (read off its interface) and the floor they set: those bytes over the link rate.
GPU modes: fp32 with TF32 off | bf16 | fp16 (GradScaler), with model FLOP utilisation.
Figures are medians over `--runs` interleaved rounds of `--steps` timed steps each (after
`--warmup` untimed ones), all through ampfleet's own Trainer (autocast, hooks, DDP).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.workers.launch import threads_per_rank
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.recipes.gpt_bench import GPTBenchHyperparameters, build
from ampfleet.workers.training.task import RecipeContext
from bench.allreduce import interface_bytes
from tests.support.localranks import run_ranks

CPU_MODEL = {
    "d_model": 512,
    "n_layers": 6,
    "n_heads": 8,
    "vocab_size": 8192,
    "block_size": 128,
    "batch_size": 8,
}
GPU_MODEL = {
    "d_model": 1024,
    "n_layers": 8,
    "n_heads": 16,
    "vocab_size": 32768,
    "block_size": 1024,
    "batch_size": 8,
}
CPU_MODES = [("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "bf16")]
GPU_MODES = [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16")]
H200_BF16_PEAK_FLOPS = 989e12  # dense bf16, vendor datasheet (SXM)


def _steps(
    rank: int,
    world_size: int,
    precision: str,
    allreduce: str,
    model: dict[str, Any],
    steps: int,
    warmup: int,
    cuda: bool,
    strategy: str = "ddp",
    interface: str | None = None,
    wire: str | None = None,
) -> dict[str, float]:
    """`interface`: the link whose sent bytes to count over the timed steps (on a bed);
    `wire`: the gloo half-precision wire (ring.ALGORITHMS) instead of the default one."""
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        torch.backends.cudnn.allow_tf32 = False
    else:
        torch.set_num_threads(threads_per_rank(world_size))
    torch.manual_seed(0)
    task = build(
        GPTBenchHyperparameters(**model, eval_batches=1), RecipeContext(rank, world_size, device, 0)
    )
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LoopConfig(
            max_steps=steps + warmup + 1,
            epochs=None,
            requested_precision=precision,
            requested_allreduce_dtype=allreduce,
            precision=precision,
            allreduce_dtype=allreduce,
            backend="nccl" if cuda else "gloo",
            device=device,
            rank=rank,
            world_size=world_size,
            seed=0,
            eval_every_steps=0,
            # No logging step inside the timed window: logging synchronises the device at
            # every phase boundary to attribute time, which a throughput figure must not pay.
            log_every_steps=steps + warmup + 1,
            checkpoint_every_steps=0,
            keep_last_checkpoints=1,
            checkpoint_dir=Path(tmp),
            guard_every_steps=0,
            parallel=ParallelConfig(strategy=strategy),
        )
        trainer = Trainer(task, cfg, writer=None)
        if wire:
            trainer.comm.algorithm = wire
        trainer.batches = trainer.data.micro_batches(start=0)
        try:
            for _ in range(warmup):
                trainer.step_once()
            _sync(cuda)
            sent = interface_bytes(interface) if interface else 0
            started = time.perf_counter()
            for _ in range(steps):
                trainer.step_once()
            _sync(cuda)
            step_s = (time.perf_counter() - started) / steps
            sent = interface_bytes(interface) - sent if interface else 0
        finally:
            trainer.comm.close()
    gpt = task.model
    tokens = model["batch_size"] * model["block_size"] * world_size
    return {
        "step_s": step_s,
        "sent_per_step": sent / steps,
        "flops_per_step": gpt.flops_per_token() * tokens,  # type: ignore[operator]
        "parameters": float(gpt.num_parameters()),  # type: ignore[operator]
    }


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()
    else:
        dist.barrier()


def _run_cuda(
    precision: str, allreduce: str, model: dict[str, Any], steps: int, warmup: int
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method=f"file://{tmp}/init", rank=0, world_size=1)
        try:
            return _steps(0, 1, precision, allreduce, model, steps, warmup, cuda=True)
        finally:
            dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--strategy", choices=["ddp", "compare"], default="ddp", help="compare: DDP vs FSDP, bf16"
    )
    parser.add_argument("--link", help="a rate (1gbit): 2 hosts x 1 rank over a shaped link")
    parser.add_argument(
        "--ring",
        action="store_true",
        help="CPU: also bf16 + bf16 AllReduce by the ring in the two-rank swap's place",
    )
    args = parser.parse_args()
    if args.strategy == "compare":
        _compare_strategies(args)
        return
    if args.link:
        _on_link(args)
        return
    modes: list[tuple[str, str, str | None]] = [
        (precision, allreduce, None)
        for precision, allreduce in (GPU_MODES if args.gpu else CPU_MODES)
    ]
    if args.ring and not args.gpu:
        modes.append(("bf16", "bf16", "ring"))
    model = GPU_MODEL if args.gpu else CPU_MODEL
    results: dict[tuple[str, str, str | None], list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.runs):
        for precision, allreduce, wire in modes:
            if args.gpu:
                result = _run_cuda(precision, allreduce, model, args.steps, args.warmup)
            else:
                result = run_ranks(
                    _steps,
                    2,
                    *(precision, allreduce, model, args.steps, args.warmup, False),
                    *("ddp", None, wire),
                    timeout_s=600,
                )[0]
            results[(precision, allreduce, wire)].append(result)

    first = results[modes[0]][0]
    where = torch.cuda.get_device_name() if args.gpu else "CPU, 2 gloo ranks"
    print(
        f"gpt-bench {first['parameters'] / 1e6:.1f}M parameters on {where}; "
        f"median of {args.runs} runs x {args.steps} steps"
    )
    baseline = statistics.median(r["step_s"] for r in results[modes[0]])
    print(
        f"{'compute':>8} {'allreduce':>9} {'steps/s':>8} {'vs fp32':>8}"
        + ("  MFU(bf16 peak)" if args.gpu else "")
    )
    for mode in modes:
        step_s = statistics.median(r["step_s"] for r in results[mode])
        allreduce = f"{mode[1]} {mode[2]}" if mode[2] else mode[1]
        line = f"{mode[0]:>8} {allreduce:>9} {1 / step_s:>8.3f} {baseline / step_s:>7.2f}x"
        if args.gpu:
            line += f"  {first['flops_per_step'] / step_s / H200_BF16_PEAK_FLOPS:>8.1%}"
        print(line)
    if args.ring and not args.gpu:
        gains = {
            wire: [
                wide["step_s"] / half["step_s"]
                for wide, half in zip(
                    results[("bf16", "fp32", None)], results[("bf16", "bf16", wire)], strict=True
                )
            ]
            for wire in (None, "ring")
        }
        for wire, ratios in gains.items():
            print(
                f"bf16 AllReduce by the {wire or 'swap'} over bf16 + fp32 AllReduce: "
                f"{statistics.median(ratios):.2f}x (runs: {', '.join(f'{r:.2f}' for r in ratios)})"
            )


def _on_link(args: argparse.Namespace) -> None:
    """The CPU modes with rank r in host r of one bed, rounds interleaved as on loopback;
    ratios of the same run: what the AllReduce dtype alone gives, and all of bf16."""
    from tests.support.bedranks import run_on_bed
    from tests.support.netbed import network_bed, rate_bits

    results: dict[tuple[str, str], list[dict[str, float]]] = {m: [] for m in CPU_MODES}
    with network_bed(2, rate=args.link) as bed:
        for _ in range(args.runs):
            for precision, allreduce in CPU_MODES:
                result = run_on_bed(
                    bed,
                    _steps,
                    *(precision, allreduce, CPU_MODEL, args.steps, args.warmup, False),
                    *("ddp", bed.interface),
                    timeout_s=1800,
                )[0]
                results[(precision, allreduce)].append(result)
    step_s = {m: statistics.median(r["step_s"] for r in results[m]) for m in CPU_MODES}
    print(
        f"gpt-bench {results[CPU_MODES[0]][0]['parameters'] / 1e6:.1f}M parameters, 2 hosts "
        f"x 1 gloo rank, {args.link} link (tbf); median of {args.runs} runs x {args.steps} steps"
    )
    print(
        f"{'compute':>8} {'allreduce':>9} {'steps/s':>8} {'s/step':>7} "
        f"{'MB sent/step':>12} {'floor s':>8} {'rest s':>7}"
    )
    for mode in CPU_MODES:
        sent = statistics.median(r["sent_per_step"] for r in results[mode])
        floor = sent * 8 / rate_bits(args.link)
        print(
            f"{mode[0]:>8} {mode[1]:>9} {1 / step_s[mode]:>8.3f} {step_s[mode]:>7.3f} "
            f"{sent / 1e6:>12.1f} {floor:>8.3f} {step_s[mode] - floor:>7.3f}"
        )
    half, wide, fp32 = step_s[("bf16", "bf16")], step_s[("bf16", "fp32")], step_s[("fp32", "fp32")]
    print(f"bf16 + bf16 AllReduce vs bf16 + fp32 AllReduce: {wide / half:.2f}x (target >= 1.5x)")
    print(f"bf16 + bf16 AllReduce vs fp32: {fp32 / half:.2f}x")


def _compare_strategies(args: argparse.Namespace) -> None:
    """bf16 compute and reduction, the same model and ranks, under DDP and FSDP (which adds
    an all-gather per block in forward and again in backward, and reduce-scatters)."""
    model = GPU_MODEL if args.gpu else CPU_MODEL
    results: dict[str, list[float]] = {"ddp": [], "fsdp": []}
    for _ in range(args.runs):
        for strategy, times in results.items():
            if args.gpu:
                raise SystemExit("--strategy compare runs on 2 gloo ranks (CPU) for now")
            result = run_ranks(
                _steps,
                2,
                "bf16",
                "bf16",
                model,
                args.steps,
                args.warmup,
                False,
                strategy,
                timeout_s=600,
            )[0]
            times.append(result["step_s"])
            parameters = result["parameters"]
    ddp, fsdp = (statistics.median(results[s]) for s in ("ddp", "fsdp"))
    print(
        f"gpt-bench {parameters / 1e6:.1f}M parameters, CPU, 2 gloo ranks, bf16 compute and "
        f"reduction; median of {args.runs} runs x {args.steps} steps"
    )
    print(f"DDP {1 / ddp:.3f} steps/s, FSDP {1 / fsdp:.3f} steps/s: FSDP/DDP {ddp / fsdp:.2f}x")


if __name__ == "__main__":
    main()
