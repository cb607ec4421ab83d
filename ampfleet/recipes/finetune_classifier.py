"""`finetune-classifier`: fine-tuning a Hugging Face model as a sequence classifier.

The base is any model folder whose architecture transformers' AutoModelForSequenceClassification
builds (a causal LM's folder too: the classification head is new, initialised on the node and
trained with the rest). Hyperparameters, methods, precision and exports are finetune-lm's
(ampfleet/recipes/finetune.py); for LoRA the head trains in full beside the adapters (peft's
SEQ_CLS task keeps it in `modules_to_save`). The inputs: `model`, `train` and optionally
`validation`, each a CSV file with a header row naming `text` and `label` columns, or JSONL
lines `{"text": ..., "label": ...}`. Labels are strings or integers; the classes are the
training file's labels (integers in numeric order, strings in text order), stored in the
exported config's id2label / label2id.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ampfleet.core.dataset_summary import Fields, csv_fields, csv_rows, json_fields
from ampfleet.core.recipes import InputError, ListedInput, RecipeDefinition
from ampfleet.recipes.finetune import FineTuneHyperparameters, check_listed_as
from ampfleet.recipes.finetune_inputs import (
    MODEL,
    SEQUENCE_CLASSIFICATION,
    TRAIN,
    VALIDATION,
    check_data_file,
    check_model_folder,
    check_records_summary,
    jsonl_records,
    missing_column,
)

TABLES = (".csv", ".jsonl")
TEXT, LABEL = "text", "label"
MAX_LABELS = 10_000
FORMAT = 'each row has a "text" string and a "label" string or integer'


class ClassifierHyperparameters(FineTuneHyperparameters):
    """finetune-lm's, less what only generation needs."""


def labelled_problem(fields: Fields) -> str | None:
    """What a row of this shape lacks, or None: a `text` string (a CSV cell may be empty)
    and a `label` string or integer (not an empty cell)."""
    for field, right in ((TEXT, ("string", "empty")), (LABEL, ("string", "integer"))):
        kind = fields.get(field)
        if kind not in right:
            problem = "no" if kind in (None, "empty") else "a wrong-typed"
            return f'{problem} "{field}" field ({FORMAT})'
    return None


def _rows(path: Path, name: str) -> Iterator[tuple[int, Fields, Mapping[Any, Any]]]:
    """(line number, shape, row) of each row, as the file holds them."""
    if path.name.lower().endswith(".csv"):
        with path.open(encoding="utf-8", newline="") as file:
            header, rows = csv_rows(file)
            if missing := missing_column((TEXT, LABEL), header):
                raise InputError(name, f"{path.name}: {missing}")
            for number, row in rows:
                yield number, csv_fields(row), row
        return
    for number, record in jsonl_records(path, name):
        yield number, json_fields(record), record


def labelled_examples(path: Path, name: str) -> list[tuple[str, str]]:
    """Each row as (text, label as a string); every row is checked."""
    examples: list[tuple[str, str]] = []
    for number, fields, row in _rows(path, name):
        problem = labelled_problem(fields)
        if problem is not None:
            raise InputError(name, f"{path.name} line {number}: {problem}")
        examples.append((str(row[TEXT]), str(row[LABEL])))
    if not examples:
        raise InputError(name, f"{path.name} holds no examples")
    return examples


def label_names(examples: Sequence[tuple[str, str]], path: Path) -> list[str]:
    """The classes, in id order: integers numerically, otherwise as text sorts."""
    names = {label for _, label in examples}
    if len(names) < 2:
        raise InputError(
            TRAIN,
            f"{path.name}: every row has the label {next(iter(names))!r}; a classifier "
            "learns two or more",
        )
    if len(names) > MAX_LABELS:
        raise InputError(TRAIN, f"{path.name}: {len(names)} labels, more than {MAX_LABELS}")
    numeric = all(n.lstrip("-").isdigit() for n in names)
    return sorted(names, key=int) if numeric else sorted(names)


def check_known_labels(
    examples: Sequence[tuple[str, str]], known: Sequence[str], path: Path
) -> None:
    """Validation rows may only carry labels the training file has."""
    unknown = sorted({label for _, label in examples} - set(known))
    if unknown:
        raise InputError(
            VALIDATION,
            f'{path.name}: "label" {unknown[0]!r} is not a label of the training '
            f"file (it has {', '.join(known[:10])})",
        )


def check_listed(_hp: ClassifierHyperparameters, listed: Mapping[str, ListedInput]) -> None:
    check_listed_as(listed, TABLES, SEQUENCE_CLASSIFICATION)
    for name in (TRAIN, VALIDATION):
        if name in listed:
            check_records_summary(name, listed[name], labelled_problem, (TEXT, LABEL))


def check_on_node(_hp: ClassifierHyperparameters, inputs: Mapping[str, Path]) -> None:
    check_listed(_hp, {name: ListedInput(None) for name in inputs})
    check_model_folder(inputs[MODEL], SEQUENCE_CLASSIFICATION)
    for name in (TRAIN, VALIDATION):
        if name in inputs:
            check_data_file(inputs[name], name, TABLES)
    known = label_names(labelled_examples(inputs[TRAIN], TRAIN), inputs[TRAIN])
    if VALIDATION in inputs:
        path = inputs[VALIDATION]
        check_known_labels(labelled_examples(path, VALIDATION), known, path)


sequence_classification = RecipeDefinition(
    name="finetune-classifier",
    description="Fine-tune a Hugging Face model as a sequence classifier (inputs: model, "
    "train, validation) on CSV or JSONL text + label; full or LoRA; exports a merged model "
    "and the adapter.",
    hyperparameters=ClassifierHyperparameters,
    build_path="ampfleet.workers.training.recipes.finetune_classifier:build",
    parameter_count=lambda _hp: 0,  # the base model's config is read on the node
    metrics={"val_loss": "min", "val_accuracy": "max"},
    check_listed_inputs=check_listed,
    check_inputs=check_on_node,
)
