"""`finetune-lm` on a rank: supervised fine-tuning of a Hugging Face causal LM.

Each example is its prompt's tokens (with the tokenizer's own special tokens, a BOS where it
adds one), then its completion's and an EOS; the labels are the completion's tokens and the
EOS, or every token with `completion_only_loss: false` (a `{"text"}` line has no prompt, so
all of it counts). Examples are cut to `max_seq_length`; one left with nothing to learn is
dropped. The loss is the mean over a micro-batch's labelled tokens; validation reports the
mean over every labelled token of the validation set (`val_loss`, and its `val_perplexity`).
At each evaluation the model completes a few fixed prompts greedily (`sample_prompts`, or
the first validation prompts): the job's `samples/step-<step>.txt`; at the end the merged
model does the same into outputs/samples.txt.
Its hyperparameters and input checks live in ampfleet/recipes/finetune.py.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from ampfleet.recipes.finetune import CausalLMHyperparameters
from ampfleet.recipes.finetune_inputs import MODEL, TRAIN, VALIDATION, completion_pairs
from ampfleet.workers.training.recipes.hf import (
    Base,
    blocks_of,
    export_folders,
    load_model,
    load_tokenizer,
    split,
)
from ampfleet.workers.training.task import Batch, RecipeContext, TrainingTask

IGNORE = -100  # the label of a token the loss leaves out (cross_entropy's ignore_index)
SAMPLES_FILE = "samples.txt"
SAMPLE_PROMPTS = 3  # without `sample_prompts`, the first validation prompts


def encode(
    tokenizer: Any, prompt: str, completion: str, *, max_length: int, completion_only: bool
) -> dict[str, list[int]] | None:
    """One example's input ids and labels, or None where nothing is left to learn."""
    prompt_ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    completion_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is not None:
        completion_ids.append(tokenizer.eos_token_id)
    ids = (prompt_ids + completion_ids)[:max_length]
    labels = ([IGNORE] * len(prompt_ids) if completion_only else prompt_ids) + completion_ids
    labels = labels[:max_length]
    if all(label == IGNORE for label in labels[1:]):  # the first token has no prediction
        return None
    return {"input_ids": ids, "labels": labels}


def collate(examples: list[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded to the longest example; padding is masked and unlabelled."""
    longest = max(len(e["input_ids"]) for e in examples)

    def padded(values: list[int], fill: int) -> list[int]:
        return values + [fill] * (longest - len(values))

    return {
        "input_ids": torch.tensor([padded(e["input_ids"], pad_id) for e in examples]),
        "attention_mask": torch.tensor([padded([1] * len(e["input_ids"]), 0) for e in examples]),
        "labels": torch.tensor([padded(e["labels"], IGNORE) for e in examples]),
    }


def token_losses(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, labelled tokens): each position predicts the next token."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    predicted = logits[:, :-1].float()
    targets = batch["labels"][:, 1:]
    total = F.cross_entropy(
        predicted.reshape(-1, predicted.size(-1)),
        targets.reshape(-1),
        ignore_index=IGNORE,
        reduction="sum",
    )
    return total, (targets != IGNORE).sum()


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    total, count = token_losses(model, batch)
    return total / count.clamp_min(1)


def _eval_step(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
    total, count = token_losses(model, batch)
    return {"loss_sum": total, "tokens": count.float()}


def _eval_finalize(sums: dict[str, float]) -> dict[str, float]:
    loss = sums["loss_sum"] / max(sums["tokens"], 1.0)
    return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}


def completed(
    model: nn.Module, ids: torch.Tensor, max_new_tokens: int, eos: int | None
) -> list[int]:
    """Greedy decoding of one prompt, `ids` (1 x length): exactly `max_new_tokens` forward
    passes over the sequence so far, whatever it generates (under FSDP each pass is
    collective, so no rank may stop early); what comes after the first EOS is dropped. The
    model's own forward, not `generate`: a sharded model's root gathers its parameters in
    its own forward, which a peft model's `generate` bypasses. No key/value cache: the
    samples are a few short completions, and the cache's argument names differ between
    the transformers releases the recipe takes."""
    tokens: list[int] = []
    for _ in range(max_new_tokens):
        token = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(int(token))
        ids = torch.cat([ids, token], dim=1)
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def samples_text(model: nn.Module, tokenizer: Any, prompts: list[str], max_new_tokens: int) -> str:
    """Each prompt and the model's greedy completion of it, one block per prompt."""
    device = next(model.parameters()).device
    blocks = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"].to(device)
        new = completed(model, ids, max_new_tokens, tokenizer.eos_token_id)
        completion = tokenizer.decode(new, skip_special_tokens=True)
        blocks.append(f"### prompt\n{prompt}\n### completion\n{completion}\n")
    return "\n".join(blocks)


def build(hp: CausalLMHyperparameters, ctx: RecipeContext) -> TrainingTask:
    from transformers import AutoModelForCausalLM

    folder = ctx.inputs[MODEL]
    tokenizer = load_tokenizer(folder)
    validation = (
        completion_pairs(ctx.inputs[VALIDATION], VALIDATION) if VALIDATION in ctx.inputs else None
    )
    train_pairs, val_pairs = split(
        completion_pairs(ctx.inputs[TRAIN], TRAIN), validation, hp.val_fraction
    )
    tokenize = partial(
        encode,
        tokenizer,
        max_length=hp.max_seq_length,
        completion_only=hp.completion_only_loss,
    )
    train = [e for e in (tokenize(p, c) for p, c in train_pairs) if e is not None]
    val = [e for e in (tokenize(p, c) for p, c in val_pairs) if e is not None]
    if not train:
        raise ValueError(
            f"input {TRAIN!r}: no example has a completion token within max_seq_length "
            f"{hp.max_seq_length}"
        )
    base = Base(folder, AutoModelForCausalLM, "CAUSAL_LM", {})
    model = load_model(base, hp)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    prompts = hp.sample_prompts or [p for p, _ in val_pairs[:SAMPLE_PROMPTS] if p]

    def samples(model: nn.Module) -> str:
        return samples_text(model, tokenizer, prompts, hp.sample_max_new_tokens)

    def export(trained: dict[str, torch.Tensor], export_dir: Path) -> dict[str, Any]:
        def keep_samples(merged: nn.Module) -> None:
            if prompts and ctx.output_dir is not None:
                merged.eval()
                with torch.no_grad():
                    text = samples(merged)
                (ctx.output_dir / SAMPLES_FILE).write_text(text, encoding="utf-8")

        return export_folders(
            base, hp, tokenizer, trained, export_dir, ctx.export_dtype, after=keep_samples
        )

    return TrainingTask(
        model=model,
        train_dataset=train,  # type: ignore[arg-type]  # a list is a map-style dataset
        val_dataset=val or None,  # type: ignore[arg-type]
        loss=_loss,
        eval_step=_eval_step,
        eval_finalize=_eval_finalize,
        batch_size=hp.batch_size,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        warmup_steps=hp.warmup_steps,
        collate_fn=partial(collate, pad_id=pad_id),
        blocks=blocks_of(model),
        export=export,
        samples=samples if prompts else None,
    )
