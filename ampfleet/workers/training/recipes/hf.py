"""What the fine-tuning recipes share on a rank: the base model and tokenizer from the job's
`model` input (local files only: nothing is fetched from a hub, nothing pickled is loaded,
no code from the folder runs), the method (full fine-tuning, or LoRA adapters through peft
with every base weight frozen), the blocks FSDP shards, and the export.

Precision stays the platform's: the model is built in fp32 and the loop applies autocast,
the fp32 master weights and the reduction dtype; a LoRA base, frozen, is held in the job's
half precision by the platform (parallel.hold_frozen_in), and only the adapters' gradients
are ever reduced.

The export writes Hugging Face folders beside model.safetensors: `hf/merged/` (config,
model.safetensors, tokenizer: what `from_pretrained` loads as is) in the dtype the spec's
`export.dtype` asks, and, for LoRA, the peft adapter `hf/adapter/` (fp32). They are rebuilt
on the CPU from the base folder and the trained parameters, so the merged weights are the
base's own plus the adapters' fp32 update, merged in fp32 and rounded once to the asked
dtype, not merged from a half-precision copy of them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from ampfleet.core.artifact_names import HF_PREFIX
from ampfleet.recipes.finetune import FineTuneHyperparameters
from ampfleet.recipes.finetune_inputs import LORA_TARGETS
from ampfleet.workers.training.precision import DTYPES

# Belt and braces beside local_files_only: no hub call from a rank, whatever a library does.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

EXPORT_FOLDER = HF_PREFIX.rstrip("/")
MERGED, ADAPTER = "merged", "adapter"
SPLIT_SEED = 1234  # every rank and every attempt hold out the same validation examples

Example = TypeVar("Example")


@dataclass(frozen=True)
class Base:
    """How to build the recipe's model from the base folder, again at export."""

    folder: Path
    auto_class: Any
    """transformers' AutoModelFor... class."""
    task_type: str
    """peft's TaskType name (CAUSAL_LM, SEQ_CLS)."""
    model_kwargs: dict[str, Any]
    """What from_pretrained needs beyond the folder (a classifier's labels)."""


def split(
    train: list[Example], validation: list[Example] | None, fraction: float
) -> tuple[list[Example], list[Example]]:
    """The validation input as it is, or `fraction` of train held out by a fixed shuffle."""
    if validation is not None:
        return train, validation
    order = list(range(len(train)))
    random.Random(SPLIT_SEED).shuffle(order)
    held = set(order[: max(1, round(len(train) * fraction))])
    return (
        [example for i, example in enumerate(train) if i not in held],
        [example for i, example in enumerate(train) if i in held],
    )


def load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)


def load_model(base: Base, hp: FineTuneHyperparameters) -> nn.Module:
    """The base in fp32 with the method applied: LoRA adapters (everything else frozen),
    or the whole model trainable."""
    model = base.auto_class.from_pretrained(
        base.folder,
        local_files_only=True,
        trust_remote_code=False,
        use_safetensors=True,
        dtype=torch.float32,
        **base.model_kwargs,
    )
    if getattr(model.config, "use_cache", None):
        model.config.use_cache = False  # training keeps no key/value cache
    if hp.method == "full":
        return model  # type: ignore[no-any-return]
    from peft import LoraConfig, get_peft_model

    model_type = model.config.model_type
    # None: peft's own defaults for an architecture the table leaves out.
    targets = hp.lora.target_modules or list(LORA_TARGETS.get(model_type, ())) or None
    config = LoraConfig(
        r=hp.lora.r,
        lora_alpha=hp.lora.alpha,
        lora_dropout=hp.lora.dropout,
        target_modules=targets,
        task_type=base.task_type,
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # no module of that name: peft says which it looked for
        raise ValueError(f"lora.target_modules {targets}: {exc}") from None


def blocks_of(model: Any) -> list[nn.Module]:
    """The transformer's layers, by the class names transformers itself keeps together."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(inner, "_no_split_modules", None) or ())
    return [module for module in inner.modules() if type(module).__name__ in names]


def trainable_counts(model: nn.Module) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def export_folders(
    base: Base,
    hp: FineTuneHyperparameters,
    tokenizer: Any,
    trained: dict[str, torch.Tensor],
    export_dir: Path,
    dtype: str,
    after: Callable[[nn.Module], None] | None = None,
) -> dict[str, Any]:
    """Rank 0, at the end: `hf/merged/` in `dtype` (the spec's export.dtype) and, for
    LoRA, `hf/adapter/` (fp32, as the adapters trained) from the trained master weights;
    `after(merged)` may use the merged model (samples). Returns the manifest's lineage of
    the method."""
    model: Any = load_model(base, hp)
    trainable, total = trainable_counts(model)
    wanted = {name for name, p in model.named_parameters() if p.requires_grad}
    missing = sorted(wanted - set(trained))
    if missing:
        raise RuntimeError(f"the trained weights lack {', '.join(missing[:5])}")
    # Only what trained comes from the run: the frozen base stays as its files hold it.
    model.load_state_dict({name: trained[name] for name in wanted}, strict=False)
    root = export_dir / EXPORT_FOLDER
    if hp.method == "lora":
        model.save_pretrained(root / ADAPTER, safe_serialization=True)
        tokenizer.save_pretrained(root / ADAPTER)
        model = model.merge_and_unload()
    model.config.use_cache = True
    model = model.to(DTYPES[dtype])
    model.save_pretrained(root / MERGED, safe_serialization=True)
    tokenizer.save_pretrained(root / MERGED)
    if after is not None:
        after(model)
    lineage: dict[str, Any] = {
        "method": hp.method,
        "merged_dtype": dtype,
        "trained_parameters": trainable,
        "parameters": total,
    }
    if hp.method == "lora":
        lineage["lora"] = hp.lora.model_dump(mode="json")
    return lineage
