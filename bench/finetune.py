"""LoRA against full fine-tuning of one Hugging Face model, and bf16 against fp32, side by side.

    python -m bench.finetune                     # 2 gloo ranks, a 57.2M-parameter Llama-style model
    python -m bench.finetune --runs 3 --steps 4 --warmup 1
    python -m bench.finetune --layers 4 --modes lora:bf16,full:bf16   # quicker, smaller

A Llama-style causal LM (hidden 768, MLP 2048, 12 heads over 4 key/value heads, a byte
vocabulary, `--layers` blocks) is made from its config and saved with save_pretrained once;
each mode then runs in fresh rank processes through `finetune-lm`'s own build and ampfleet's
Trainer (the job's autocast, frozen base held in the half dtype, reduction hooks, AdamW) on
the echo task, `--batch` examples of up to `--seq` tokens per rank per step, for `--warmup`
untimed and `--steps` timed optimizer steps. Per mode: the larger rank's peak resident
memory (ru_maxrss, the figure a job reports: it includes loading the base in fp32 before a
LoRA base is cast down), steps/s, and the bytes a rank hands to the AllReduce per step
(what trains, in the reduction dtype). Modes are `method:precision` (the reduction in the
same dtype); ratios against the first mode given, then LoRA/full and bf16/fp32 pairs that
ran. With `--runs`, medians of interleaved rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ampfleet.recipes.finetune import CausalLMHyperparameters
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.recipes.finetune_lm import build
from ampfleet.workers.training.task import RecipeContext
from tests.support.hf_models import byte_tokenizer, echo_task
from tests.support.localranks import run_ranks

MODES = [("lora", "bf16"), ("full", "bf16"), ("full", "fp32"), ("lora", "fp32")]


def model_folder(folder: Path, layers: int) -> Path:
    """A randomly initialised Llama-style model and its byte tokenizer, as a hub folder."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=layers,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=256,
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def train_and_measure(
    rank: int,
    world_size: int,
    method: str,
    precision: str,
    inputs: dict[str, Path],
    batch: int,
    seq: int,
    steps: int,
    warmup: int,
) -> dict[str, float]:
    torch.manual_seed(0)
    hp = CausalLMHyperparameters(method=method, batch_size=batch, max_seq_length=seq)
    task = build(hp, RecipeContext(rank, world_size, torch.device("cpu"), 0, inputs=inputs))
    trainable = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in task.model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LoopConfig(
            max_steps=steps + warmup + 1,
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
            # Only the last timed step reports (its peak memory and bytes reduced): a report
            # adds its own collectives, which the timed window should not pay every step.
            log_every_steps=steps + warmup,
            checkpoint_every_steps=0,
            keep_last_checkpoints=1,
            checkpoint_dir=Path(tmp),
            guard_every_steps=0,
            parallel=ParallelConfig(strategy="ddp"),
        )
        trainer = Trainer(task, cfg, writer=None)
        trainer.batches = trainer.data.micro_batches(start=0)
        try:
            for _ in range(warmup):
                trainer.step_once()
            started = time.perf_counter()
            for _ in range(steps):
                reported = trainer.step_once()
            step_s = (time.perf_counter() - started) / steps
        finally:
            trainer.comm.close()
    return {
        "peak_mb": reported["peak_memory_mb"],
        "step_s": step_s,
        "allreduce_bytes": reported["allreduce_bytes"],
        "trainable": float(trainable),
        "parameters": float(total),
    }


def _mode(text: str) -> tuple[str, str]:
    method, _, precision = text.partition(":")
    if (method, precision) not in MODES:
        raise argparse.ArgumentTypeError(f"{text}: choose from {', '.join(map(':'.join, MODES))}")
    return method, precision


def _ratio(rows: dict[tuple[str, str], dict[str, float]], a: Any, b: Any, what: str) -> None:
    if a not in rows or b not in rows:
        return
    x, y = rows[a], rows[b]
    print(
        f"{':'.join(a)} / {':'.join(b)} ({what}): peak memory {x['peak_mb'] / y['peak_mb']:.2f}x, "
        f"steps/s {y['step_s'] / x['step_s']:.2f}x, "
        f"bytes reduced {x['allreduce_bytes'] / y['allreduce_bytes']:.4f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--layers", type=int, default=9)
    parser.add_argument("--batch", type=int, default=4, help="examples per rank per step")
    parser.add_argument("--seq", type=int, default=32, help="max_seq_length")
    parser.add_argument("--runs", type=int, default=1, help="interleaved rounds; medians")
    parser.add_argument(
        "--modes",
        type=lambda text: [_mode(m) for m in text.split(",")],
        default=MODES,
        help="method:precision pairs, the first the baseline (default: all four)",
    )
    args = parser.parse_args()
    modes: list[tuple[str, str]] = args.modes
    runs: dict[tuple[str, str], list[dict[str, float]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train, _ = echo_task(root / "data", train=256, validation=8)
        inputs = {"model": model_folder(root / "base", args.layers), "train": train}
        for _ in range(args.runs):
            for mode in modes:
                ranks = run_ranks(
                    train_and_measure,
                    args.ranks,
                    *mode,
                    inputs,
                    args.batch,
                    args.seq,
                    args.steps,
                    args.warmup,
                    timeout_s=1800,
                )
                worst = max(ranks, key=lambda r: r["peak_mb"])
                runs[mode].append({**ranks[0], "peak_mb": worst["peak_mb"]})
    first = runs[modes[0]][0]
    print(
        f"Llama-style {first['parameters'] / 1e6:.1f}M parameters ({args.layers} layers), "
        f"{args.ranks} gloo ranks, {args.steps} timed steps (after {args.warmup}) of "
        f"{args.batch} x <= {args.seq} tokens per rank; median of {args.runs} run(s) per mode"
    )
    rows = {
        mode: {
            key: statistics.median(r[key] for r in results)
            for key in ("peak_mb", "step_s", "allreduce_bytes", "trainable")
        }
        for mode, results in runs.items()
    }
    baseline = rows[modes[0]]
    print(
        f"{'method':>6} {'precision':>9} {'trains':>10} {'peak MB/rank':>12} {'range':>13} "
        f"{'steps/s':>8} {'range':>11} {'reduced B/step':>15} {'memory':>7} {'speed':>7}"
    )
    for mode in modes:
        row, peaks = rows[mode], [r["peak_mb"] for r in runs[mode]]
        speeds = [1 / r["step_s"] for r in runs[mode]]
        print(
            f"{mode[0]:>6} {mode[1]:>9} {row['trainable'] / 1e6:>9.2f}M {row['peak_mb']:>12,.0f} "
            f"{f'{min(peaks):,.0f}-{max(peaks):,.0f}':>13} {1 / row['step_s']:>8.3f} "
            f"{f'{min(speeds):.3f}-{max(speeds):.3f}':>11} "
            f"{row['allreduce_bytes']:>15,.0f} {row['peak_mb'] / baseline['peak_mb']:>6.2f}x "
            f"{baseline['step_s'] / row['step_s']:>6.2f}x"
        )
    _ratio(rows, ("lora", "bf16"), ("full", "bf16"), "the same precision")
    _ratio(rows, ("full", "bf16"), ("full", "fp32"), "the same method")
    _ratio(rows, ("lora", "bf16"), ("lora", "fp32"), "the same method")


if __name__ == "__main__":
    main()
