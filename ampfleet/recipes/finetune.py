"""`finetune-lm`: fine-tuning a Hugging Face causal language model on the job's own data.

The hyperparameters are named as hosted fine-tuning APIs name them (`learning_rate`,
`batch_size`, `warmup_steps`, `method: full | lora` with `lora: {r, alpha, dropout,
target_modules}`); epochs and steps are the spec's `stop`, as for every job, and precision,
sharding and the gradient reduction are the spec's too. The inputs: `model` (a model folder:
config.json, safetensors weights, tokenizer), `train` (JSONL) and optionally `validation`
(the same format; without it, `val_fraction` of `train` is held out). The model's size is
known only once a node reads its config, so admission estimates no model states for it, as
for a bundled recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ampfleet.core.recipes import InputError, ListedInput, RecipeDefinition
from ampfleet.recipes.finetune_inputs import (
    CAUSAL_LM,
    MODEL,
    TRAIN,
    VALIDATION,
    check_data_file,
    check_model_config,
    check_model_folder,
    check_model_listing,
    check_records_summary,
    check_single_file,
    completion_pairs,
    installed_model_types,
    pair_problem,
)

JSONL = (".jsonl",)


class LoraSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    r: int = Field(8, ge=1, le=1024, description="The adapters' rank.")
    alpha: int = Field(16, ge=1, le=4096, description="Scaling: alpha / r.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | None = Field(
        None,
        max_length=64,
        description="Module names to adapt; none: the architecture's attention projections.",
    )


class FineTuneHyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["full", "lora"] = Field(
        "lora",
        description="lora: the base frozen (held in the job's half precision where it asks "
        "for one), only the adapters train; full: every weight trains.",
    )
    lora: LoraSettings = Field(default_factory=LoraSettings)
    learning_rate: float = Field(2e-4, gt=0.0, le=1.0)
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    batch_size: int = Field(8, ge=1, le=4096, description="Examples per rank per step.")
    max_seq_length: int = Field(
        512, ge=8, le=131_072, description="Longer examples are cut to this many tokens."
    )
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    val_fraction: float = Field(
        0.1, gt=0.0, lt=0.9, description="Held out of `train` when there is no `validation`."
    )


class CausalLMHyperparameters(FineTuneHyperparameters):
    completion_only_loss: bool = Field(
        True, description="Loss on the completion's tokens only, not the prompt's."
    )
    sample_prompts: list[Annotated[str, StringConstraints(min_length=1, max_length=4000)]] = Field(
        default_factory=list,
        max_length=8,
        description="Completed greedily by the model at each evaluation (the job's "
        "samples/step-<step>.txt) and by the merged model into outputs/samples.txt; "
        "none: the first three validation prompts.",
    )
    sample_max_new_tokens: int = Field(32, ge=1, le=512)


def check_listed_as(
    listed: Mapping[str, ListedInput], data_suffixes: tuple[str, ...], mapping: str
) -> None:
    """What every fine-tuning recipe asks of its inputs at submit: a model folder (whose
    config, where its upload read it, names an architecture transformers' `mapping` loads)
    and one training file (and maybe one validation file) of a format it reads."""
    for name in (MODEL, TRAIN):
        if name not in listed:
            raise InputError(name, "required (inputs: {model: ..., train: ...})")
    model = listed[MODEL]
    check_model_listing(model.files)
    if config := (model.summary or {}).get("model"):
        check_model_config(config, mapping, installed_model_types)
    for name in (TRAIN, VALIDATION):
        if name in listed:
            check_single_file(name, listed[name].files, data_suffixes)


def check_listed(_hp: CausalLMHyperparameters, listed: Mapping[str, ListedInput]) -> None:
    check_listed_as(listed, JSONL, CAUSAL_LM)
    for name in (TRAIN, VALIDATION):
        if name in listed:
            check_records_summary(name, listed[name], pair_problem)


def check_on_node(hp: CausalLMHyperparameters, inputs: Mapping[str, Path]) -> None:
    check_listed(hp, {name: ListedInput(None) for name in inputs})
    check_model_folder(inputs[MODEL], CAUSAL_LM)
    for name in (TRAIN, VALIDATION):
        if name in inputs:
            check_data_file(inputs[name], name, JSONL)
            completion_pairs(inputs[name], name)


causal_lm = RecipeDefinition(
    name="finetune-lm",
    description="Fine-tune a Hugging Face causal LM (inputs: model, train, validation) on "
    "JSONL prompt/completion or text; full or LoRA; exports a merged model and the adapter.",
    hyperparameters=CausalLMHyperparameters,
    build_path="ampfleet.workers.training.recipes.finetune_lm:build",
    parameter_count=lambda _hp: 0,  # the base model's config is read on the node
    metrics={"val_loss": "min"},
    check_listed_inputs=check_listed,
    check_inputs=check_on_node,
)
