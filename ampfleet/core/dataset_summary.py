"""What an uploaded dataset holds, read once at upload so that a recipe can check it at
submit, without the API ever unpacking an archive or reading a dataset again.

Two kinds of dataset are read, the two that fine-tuning takes:
- a Hugging Face model folder (an archive with `config.json` at its top): the config's
  `model_type` and `architectures`, or what is wrong with the file;
- a JSONL or CSV data file (a single-file dataset): how many records it has and their
  *shapes*, each distinct set of fields with the JSON type of each field's value (a CSV
  cell: "string", or "empty" where it is empty), with the line where each shape first
  appears; and the first line that is not a record at all.

A shape stands for every record of that shape, so a rule about the fields a record needs,
applied to each shape, finds the first line that breaks it, as reading every record would:
the checks at submit (the summary) and on the node (the file itself) say the same words
about the same line. Reading stops past `MAX_SCAN_BYTES`, `MAX_SHAPES` distinct shapes or a
record with more than `MAX_FIELDS` fields: the summary then says it is not `complete`, and
what it did not read is checked on the node only. Datasets uploaded before summaries have
none; so have shared folders: the nodes check those.

Standard library only: the API process imports it, and so do the ranks' checks.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ampfleet.core.archives import ArchiveEntry, ArchiveRefusedError, read_files

SUMMARY_FORMAT = 1
CONFIG = "config.json"
MAX_CONFIG_BYTES = 1 << 20
MAX_SCAN_BYTES = 256 << 20
MAX_SHAPES = 32
MAX_FIELDS = 64
MAX_FIELD_NAME = 128
MAX_MODEL_TYPE = 128
MAX_ARCHITECTURES = 16
RECORD_SUFFIXES = {".jsonl": "jsonl", ".csv": "csv"}

Fields = dict[str, str]
"""A record's shape: each field's name -> the JSON type of its value."""


class RecordError(ValueError):
    """A line of a data file that is no record; the message names the line."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


def json_type(value: object) -> str:
    if isinstance(value, bool):  # before int: a bool is an int in Python
        return "boolean"
    if isinstance(value, int):
        return "integer"
    for kind, name in ((str, "string"), (float, "number"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null"


def json_fields(record: Mapping[str, object]) -> Fields:
    return {name: json_type(value) for name, value in record.items()}


def csv_fields(row: Mapping[str | None, object]) -> Fields:
    """A CSV row's cells (csv.DictReader's): "empty" for an empty cell, "string" for any
    other; a cell the row lacks (a short row) is no field, and values past the header's
    columns are not fields either."""
    return {
        name: "empty" if value == "" else "string"
        for name, value in row.items()
        if name is not None and value is not None
    }


def jsonl_records(source: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-empty line; `RecordError` at a line that is not a
    JSON object."""
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise RecordError(number, f"not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise RecordError(number, "not a JSON object")
        yield number, record


def csv_rows(
    source: Iterable[str],
) -> tuple[list[str], Iterator[tuple[int, dict[str | None, Any]]]]:
    """The header row's names, and (line number, row) of each row after it (the number of
    the line the row ends on, as csv counts them)."""
    reader = csv.DictReader(source)
    header = list(reader.fieldnames or [])

    def rows() -> Iterator[tuple[int, dict[str | None, Any]]]:
        for row in reader:
            yield reader.line_num, dict(row)

    return header, rows()


def config_summary(raw: bytes) -> dict[str, Any]:
    """A model folder's config.json: {model_type, architectures}, or {problem}."""
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return {"problem": f"{CONFIG} does not read as JSON ({exc})"}
    if not isinstance(config, dict):
        return {"problem": f"{CONFIG} is not a JSON object"}
    architectures = config.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        return {"problem": f"{CONFIG}: architectures is not a list of class names"}
    model_type = config.get("model_type")
    return {
        "model_type": model_type[:MAX_MODEL_TYPE] if isinstance(model_type, str) else None,
        "architectures": [a[:MAX_MODEL_TYPE] for a in architectures[:MAX_ARCHITECTURES]]
        if architectures is not None
        else None,
    }


class _Shapes:
    """Distinct shapes in the order they first appear, each with that line."""

    def __init__(self) -> None:
        self.first_lines: dict[tuple[tuple[str, str], ...], int] = {}
        self.count = 0

    def add(self, line: int, fields: Fields) -> bool:
        """False where the shape cannot be kept (too many shapes, fields or too long a
        field name): reading stops there."""
        if len(fields) > MAX_FIELDS or any(len(name) > MAX_FIELD_NAME for name in fields):
            return False
        key = tuple(sorted(fields.items()))
        if key not in self.first_lines:
            if len(self.first_lines) >= MAX_SHAPES:
                return False
            self.first_lines[key] = line
        self.count += 1
        return True

    def listed(self) -> list[dict[str, Any]]:
        return [{"fields": dict(key), "line": line} for key, line in self.first_lines.items()]


class _Budget:
    """A text file's lines, until `MAX_SCAN_BYTES` characters were read."""

    def __init__(self, source: Iterable[str]) -> None:
        self.source = source
        self.left = MAX_SCAN_BYTES
        self.spent = False

    def __iter__(self) -> Iterator[str]:
        for line in self.source:
            self.left -= len(line)
            if self.left < 0:
                self.spent = True
                return
            yield line


def records_summary(path: Path, filename: str) -> dict[str, Any] | None:
    """A JSONL or CSV file's records (see the module's docstring); None for another kind
    of file."""
    kind = RECORD_SUFFIXES.get(Path(filename).suffix.lower())
    if kind is None:
        return None
    shapes = _Shapes()
    summary: dict[str, Any] = {"kind": kind, "file": filename, "problem": None}
    complete = True
    with path.open(encoding="utf-8", newline="" if kind == "csv" else None) as file:
        budget = _Budget(file)
        try:
            if kind == "jsonl":
                found = ((n, json_fields(r)) for n, r in jsonl_records(budget))
            else:
                header, rows = csv_rows(budget)
                summary["header"] = header[:MAX_FIELDS]
                found = ((n, csv_fields(row)) for n, row in rows)
            for line, fields in found:
                if not shapes.add(line, fields):
                    complete = False
                    break
        except RecordError as exc:
            summary["problem"] = {"line": exc.line, "message": exc.problem}
        except (UnicodeDecodeError, csv.Error) as exc:
            summary["problem"] = {"line": None, "message": f"not UTF-8 text ({exc})"}
        complete = complete and not budget.spent
    return {**summary, "records": shapes.count, "shapes": shapes.listed(), "complete": complete}


def model_summary(path: Path, entries: list[ArchiveEntry]) -> dict[str, Any] | None:
    """An archive whose top holds config.json: that config (see `config_summary`); None
    for another archive."""
    if not any(e.path == CONFIG and e.kind == "file" for e in entries):
        return None
    try:
        ((_, raw),) = list(read_files(path, [CONFIG], MAX_CONFIG_BYTES))
    except (ArchiveRefusedError, ValueError):
        return None  # unreadable here: the node reads it, and says what is wrong
    if len(raw) > MAX_CONFIG_BYTES:
        return {"problem": f"{CONFIG} is larger than {MAX_CONFIG_BYTES} bytes"}
    return config_summary(raw)


def summarize(
    path: Path, filename: str | None, entries: list[ArchiveEntry] | None
) -> dict[str, Any] | None:
    """The summary of an upload: a single file's records (`filename`), or an archive's
    model config (`entries`, its checked listing); None where there is nothing to read."""
    if filename is not None:
        records = records_summary(path, filename)
        return None if records is None else {"format": SUMMARY_FORMAT, "records": records}
    model = model_summary(path, entries or [])
    return None if model is None else {"format": SUMMARY_FORMAT, "model": model}
