"""What the fine-tuning recipes accept as their inputs, checked without torch.

The base model is an input like any other (an uploaded dataset holding a Hugging Face model
folder, or a shared folder): nothing is fetched from a hub. The API checks what it can from
a dataset's stored file list (a config, safetensors weights, a tokenizer); each rank checks
the folder's config and the data files themselves before torch is imported and before the
ranks meet, so a wrong input fails the job in seconds with the file and the field at fault.

Which architectures a recipe trains is transformers' own answer: the model types of its
auto mapping for the task (`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, ...). Importing that module
imports torch, which this check must not, so the mapping is read from the module's source as
the literal it is (`ast`, nothing executed) in the installed transformers. One table names,
for the common architectures, the modules LoRA adapts by default (the attention projections,
as peft's own defaults for them); others get peft's defaults.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ampfleet.core.recipes import InputError

MODEL, TRAIN, VALIDATION = "model", "train", "validation"
CONFIG = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
PICKLED_WEIGHTS = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")

LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "phi3": ("qkv_proj",),
    "olmo": ("q_proj", "v_proj"),
    "gpt2": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "opt": ("q_proj", "v_proj"),
}
"""`model_type` (config.json) -> the modules LoRA adapts unless `lora.target_modules` says."""

CAUSAL_LM = "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
SEQUENCE_CLASSIFICATION = "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"
AUTO_CLASSES = {
    CAUSAL_LM: "AutoModelForCausalLM",
    SEQUENCE_CLASSIFICATION: "AutoModelForSequenceClassification",
}
"""A task's mapping in transformers.models.auto.modeling_auto -> the class that reads it."""
MAPPING_MODULE = ("models", "auto", "modeling_auto.py")


@lru_cache
def supported_model_types(mapping: str) -> frozenset[str]:
    """The `model_type`s transformers' mapping `mapping` names, read without importing
    transformers or torch."""
    spec = importlib.util.find_spec("transformers")  # finds the package, imports nothing
    if spec is None or spec.origin is None:
        raise RuntimeError("transformers is not installed (the worker extra installs it)")
    source = Path(spec.origin).parent.joinpath(*MAPPING_MODULE).read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == mapping for t in node.targets)
            and isinstance(node.value, ast.Call)
            and node.value.args
        ):
            pairs = ast.literal_eval(node.value.args[0])  # OrderedDict([(type, class), ...])
            return frozenset(str(model_type) for model_type, _ in pairs)
    raise RuntimeError(f"the installed transformers has no {mapping}")


def check_model_listing(files: Sequence[str] | None) -> None:
    """A dataset meant as the base model, by its stored file list (None: a shared folder,
    checked on the node)."""
    if files is None:
        return
    names = set(files)
    if CONFIG not in names:
        raise InputError(
            MODEL,
            f"no {CONFIG} at the top of the dataset: upload a Hugging Face model folder "
            "(save_pretrained's: config.json, *.safetensors, tokenizer files) as it is",
        )
    if not any(name.endswith(".safetensors") and "/" not in name for name in names):
        pickled = sorted(names.intersection(PICKLED_WEIGHTS))
        why = f" ({', '.join(pickled)} is a pickle, never loaded here)" if pickled else ""
        raise InputError(
            MODEL,
            f"no *.safetensors weights at the top of the dataset{why}; save the model with "
            "save_pretrained(..., safe_serialization=True)",
        )
    if not names.intersection(TOKENIZER_FILES):
        raise InputError(
            MODEL,
            f"no tokenizer ({' or '.join(TOKENIZER_FILES)}) at the top of the dataset; save "
            "the tokenizer into the model folder with tokenizer.save_pretrained",
        )


def check_model_folder(folder: Path, mapping: str) -> dict[str, Any]:
    """The folder on the node: the listing's rules, then its config's architecture, one
    that transformers' `mapping` (`CAUSAL_LM`, `SEQUENCE_CLASSIFICATION`) loads. Returns the
    config."""
    if not folder.is_dir():
        raise InputError(MODEL, f"{folder.name} is a single file, not a model folder")
    check_model_listing([p.name for p in folder.iterdir()])
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(MODEL, f"{CONFIG} does not read as JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(MODEL, f"{CONFIG} is not a JSON object")
    architectures = config.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise InputError(MODEL, f"{CONFIG}: architectures is not a list of class names")
    model_type = config.get("model_type")
    supported = supported_model_types(mapping)
    if model_type not in supported:
        named = f" (architectures {', '.join(architectures)})" if architectures else ""
        common = ", ".join(sorted(supported.intersection(LORA_TARGETS)))
        raise InputError(
            MODEL,
            f"{CONFIG}: model_type {model_type!r}{named} is not one transformers' "
            f"{AUTO_CLASSES[mapping]} loads, as this recipe needs ({len(supported)} types "
            f"do, such as {common})",
        )
    return dict(config)


def check_single_file(name: str, files: Sequence[str] | None, suffixes: tuple[str, ...]) -> None:
    """A data input, by its stored file list: one file of a format the recipe reads."""
    if files is None:
        return
    if len(files) != 1 or not files[0].lower().endswith(suffixes):
        raise InputError(
            name,
            f"expected one {' or '.join(suffixes)} file, found "
            f"{', '.join(list(files)[:5]) or 'nothing'}",
        )


def check_data_file(path: Path, name: str, suffixes: tuple[str, ...]) -> None:
    """A data input on the node: one file of a format the recipe reads."""
    if not path.is_file() or not path.name.lower().endswith(suffixes):
        what = "a folder" if path.is_dir() else path.name
        raise InputError(name, f"expected one {' or '.join(suffixes)} file, found {what}")


def jsonl_records(path: Path, name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-empty line; a line that is not a JSON object is
    an `InputError` naming it."""
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise InputError(name, f"{path.name} line {number}: not JSON ({exc})") from None
            if not isinstance(record, dict):
                raise InputError(name, f"{path.name} line {number}: not a JSON object")
            yield number, record


def completion_pairs(path: Path, name: str) -> list[tuple[str, str]]:
    """Each line as (prompt, completion): `{"prompt", "completion"}`, or `{"text"}` (all
    of it the completion, an empty prompt). Every line is checked."""
    pairs: list[tuple[str, str]] = []
    for number, record in jsonl_records(path, name):
        if "text" in record and "prompt" not in record:
            fields: tuple[str, ...] = ("text",)
        else:
            fields = ("prompt", "completion")
        for field in fields:
            if not isinstance(record.get(field), str):
                problem = "no" if field not in record else "a non-string"
                raise InputError(
                    name,
                    f'{path.name} line {number}: {problem} "{field}" field (each line is '
                    '{"prompt": ..., "completion": ...} or {"text": ...})',
                )
        if fields == ("text",):
            pairs.append(("", record["text"]))
        else:
            pairs.append((record["prompt"], record["completion"]))
    if not pairs:
        raise InputError(name, f"{path.name} holds no examples")
    return pairs
