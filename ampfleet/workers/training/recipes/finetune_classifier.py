"""`finetune-classifier` on a rank: a Hugging Face model fine-tuned as a sequence classifier.

Each example is its text's tokens (with the tokenizer's own special tokens), cut to
`max_seq_length` and right-padded in a batch; the model classifies from its last token that
is not padding (transformers finds it through the config's pad_token_id, which is set to the
tokenizer's padding token, or its EOS where it has none). The loss is the mean cross-entropy
of a micro-batch; validation reports `val_loss` (the mean over the validation set) and
`val_accuracy` (the share of its examples whose highest logit is their label).
Its hyperparameters and input checks live in ampfleet/recipes/finetune_classifier.py.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from ampfleet.recipes.finetune_classifier import (
    ClassifierHyperparameters,
    label_names,
    labelled_examples,
)
from ampfleet.recipes.finetune_inputs import MODEL, TRAIN, VALIDATION
from ampfleet.workers.training.recipes.hf import (
    Base,
    blocks_of,
    export_folders,
    load_model,
    load_tokenizer,
    split,
)
from ampfleet.workers.training.task import Batch, RecipeContext, TrainingTask


def collate(examples: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded to the longest text; padding is masked."""
    longest = max(len(ids) for ids, _ in examples)
    return {
        "input_ids": torch.tensor([ids + [pad_id] * (longest - len(ids)) for ids, _ in examples]),
        "attention_mask": torch.tensor(
            [[1] * len(ids) + [0] * (longest - len(ids)) for ids, _ in examples]
        ),
        "labels": torch.tensor([label for _, label in examples]),
    }


def _logits(model: nn.Module, batch: Batch) -> torch.Tensor:
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return out.logits.float()  # type: ignore[no-any-return]


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return F.cross_entropy(_logits(model, batch), batch["labels"])


def _eval_step(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
    logits = _logits(model, batch)
    labels = batch["labels"]
    return {
        "loss_sum": F.cross_entropy(logits, labels, reduction="sum"),
        "correct": (logits.argmax(-1) == labels).sum().float(),
        "count": torch.tensor(float(labels.numel()), device=labels.device),
    }


def _eval_finalize(sums: dict[str, float]) -> dict[str, float]:
    count = max(sums["count"], 1.0)
    return {"val_loss": sums["loss_sum"] / count, "val_accuracy": sums["correct"] / count}


def build(hp: ClassifierHyperparameters, ctx: RecipeContext) -> TrainingTask:
    from transformers import AutoModelForSequenceClassification

    folder = ctx.inputs[MODEL]
    tokenizer = load_tokenizer(folder)
    if tokenizer.pad_token_id is None:  # GPT-2's and Llama's tokenizers pad with nothing
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token else tokenizer.unk_token
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = labelled_examples(ctx.inputs[TRAIN], TRAIN)
    names = label_names(rows, ctx.inputs[TRAIN])
    label2id = {name: i for i, name in enumerate(names)}
    validation = (
        labelled_examples(ctx.inputs[VALIDATION], VALIDATION) if VALIDATION in ctx.inputs else None
    )
    train_rows, val_rows = split(rows, validation, hp.val_fraction)

    def encode(rows: list[tuple[str, str]]) -> list[tuple[list[int], int]]:
        return [
            (
                list(tokenizer(text, truncation=True, max_length=hp.max_seq_length)["input_ids"])
                or [pad_id],
                label2id[label],
            )
            for text, label in rows
        ]

    base = Base(
        folder,
        AutoModelForSequenceClassification,
        "SEQ_CLS",
        {
            "num_labels": len(names),
            "id2label": dict(enumerate(names)),
            "label2id": label2id,
            "pad_token_id": pad_id,
        },
    )
    model = load_model(base, hp)

    def export(trained: dict[str, torch.Tensor], export_dir: Path) -> dict[str, Any]:
        lineage = export_folders(base, hp, tokenizer, trained, export_dir, ctx.export_dtype)
        return {**lineage, "labels": names}

    return TrainingTask(
        model=model,
        train_dataset=encode(train_rows),  # type: ignore[arg-type]  # a map-style dataset
        val_dataset=encode(val_rows) or None,  # type: ignore[arg-type]
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
    )
