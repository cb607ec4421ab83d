"""What the fine-tuning recipes accept as their inputs, checked without torch.

The base model is an input like any other (an uploaded dataset holding a Hugging Face model
folder, or a shared folder): nothing is fetched from a hub. The API checks what it can from
a dataset's stored file list (a config, safetensors weights, a tokenizer) and from what was
read of it at upload (core/dataset_summary.py: the config's architecture, the data's
fields), so these are 422s naming the file and the field; each rank checks the folder's
config and the data files themselves again before torch is imported and before the ranks
meet (a shared folder, a dataset uploaded before summaries, the part of a very large file
the upload did not read), so a wrong input fails the job in seconds, in the same words.

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
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ampfleet.core import dataset_summary
from ampfleet.core.dataset_summary import CONFIG, Fields, RecordError
from ampfleet.core.recipes import InputError, ListedInput

MODEL, TRAIN, VALIDATION = "model", "train", "validation"
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


def supported_model_types(mapping: str) -> frozenset[str]:
    """The `model_type`s transformers' mapping `mapping` names, read without importing
    transformers or torch."""
    found = installed_model_types(mapping)
    if found is None:
        raise RuntimeError("transformers is not installed (the worker extra installs it)")
    return found


def installed_model_types(mapping: str) -> frozenset[str] | None:
    """`supported_model_types` where transformers is installed; None where it is not (an
    API host without the worker extra: the nodes check the architecture)."""
    package = transformers_folder()
    return None if package is None else model_types_in(package, mapping)


def transformers_folder() -> Path | None:
    """The installed transformers package's folder, found without importing it."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


@lru_cache
def model_types_in(package: Path, mapping: str) -> frozenset[str]:
    source = package.joinpath(*MAPPING_MODULE).read_text(encoding="utf-8")
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


def check_model_folder(folder: Path, mapping: str) -> None:
    """The folder on the node: the listing's rules, then its config's architecture, one
    that transformers' `mapping` (`CAUSAL_LM`, `SEQUENCE_CLASSIFICATION`) loads."""
    if not folder.is_dir():
        raise InputError(MODEL, f"{folder.name} is a single file, not a model folder")
    check_model_listing([p.name for p in folder.iterdir()])
    try:
        raw = (folder / CONFIG).read_bytes()
    except OSError as exc:
        raise InputError(MODEL, f"{CONFIG} cannot be read ({exc})") from None
    check_model_config(dataset_summary.config_summary(raw), mapping, supported_model_types)


def check_model_config(
    config: Mapping[str, Any],
    mapping: str,
    supported: Callable[[str], frozenset[str] | None],
) -> None:
    """A config's summary (dataset_summary.config_summary): it reads, and its model_type is
    one `supported(mapping)` names (None: nothing known here to check it against)."""
    if config.get("problem"):
        raise InputError(MODEL, str(config["problem"]))
    types = supported(mapping)
    if types is None:
        return
    model_type = config.get("model_type")
    if model_type not in types:
        architectures = config.get("architectures")
        named = f" (architectures {', '.join(architectures)})" if architectures else ""
        common = ", ".join(sorted(types.intersection(LORA_TARGETS)))
        raise InputError(
            MODEL,
            f"{CONFIG}: model_type {model_type!r}{named} is not one transformers' "
            f"{AUTO_CLASSES[mapping]} loads, as this recipe needs ({len(types)} types "
            f"do, such as {common})",
        )


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
        try:
            yield from dataset_summary.jsonl_records(file)
        except RecordError as exc:
            raise InputError(name, f"{path.name} {exc}") from None


def missing_column(needed: Sequence[str], header: Sequence[str]) -> str | None:
    """What a CSV file whose header row is `header` lacks of the columns `needed`."""
    for column in needed:
        if column not in header:
            return (
                f'no "{column}" column (the header row names {" and ".join(needed)}; it '
                f"has {', '.join(header) or 'nothing'})"
            )
    return None


PAIR_FORMAT = 'each line is {"prompt": ..., "completion": ...} or {"text": ...}'


def text_only(fields: Mapping[str, object]) -> bool:
    """A record that is all completion: `{"text"}`, no prompt."""
    return "text" in fields and "prompt" not in fields


def pair_problem(fields: Fields) -> str | None:
    """What a finetune-lm record of this shape lacks, or None: `{"text"}` (a string) where
    it has no prompt, else `{"prompt", "completion"}` (strings)."""
    needed = ("text",) if text_only(fields) else ("prompt", "completion")
    for field in needed:
        if fields.get(field) != "string":
            problem = "no" if field not in fields else "a non-string"
            return f'{problem} "{field}" field ({PAIR_FORMAT})'
    return None


def completion_pairs(path: Path, name: str) -> list[tuple[str, str]]:
    """Each line as (prompt, completion): `{"prompt", "completion"}`, or `{"text"}` (all
    of it the completion, an empty prompt). Every line is checked."""
    pairs: list[tuple[str, str]] = []
    for number, record in jsonl_records(path, name):
        problem = pair_problem(dataset_summary.json_fields(record))
        if problem is not None:
            raise InputError(name, f"{path.name} line {number}: {problem}")
        if text_only(record):
            pairs.append(("", record["text"]))
        else:
            pairs.append((record["prompt"], record["completion"]))
    if not pairs:
        raise InputError(name, f"{path.name} holds no examples")
    return pairs


def check_records_summary(
    name: str,
    listed: ListedInput,
    problem_of: Callable[[Fields], str | None],
    header: Sequence[str] = (),
) -> None:
    """A data input by what its upload read of it (dataset_summary.records_summary): the
    first line that is no record or whose shape `problem_of` refuses, a CSV header without
    a column in `header`, or no record at all, in the words the node would say them."""
    summary = (listed.summary or {}).get("records")
    if not summary:
        return  # nothing read at upload: the node reads the file
    file = summary["file"]
    if summary["kind"] == "csv" and (missing := missing_column(header, summary["header"])):
        raise InputError(name, f"{file}: {missing}")
    found: list[tuple[float, str]] = [
        (shape["line"], problem)
        for shape in summary["shapes"]
        if (problem := problem_of(shape["fields"])) is not None
    ]
    if summary["problem"] is not None:  # where reading stopped: after every shape it saw
        found.append((summary["problem"]["line"] or math.inf, summary["problem"]["message"]))
    if found:
        line, problem = min(found, key=lambda pair: pair[0])
        where = file if math.isinf(line) else f"{file} line {line}"
        raise InputError(name, f"{where}: {problem}")
    if summary["records"] == 0 and summary["complete"]:
        raise InputError(name, f"{file} holds no examples")
