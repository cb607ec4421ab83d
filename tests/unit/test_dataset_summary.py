"""What an upload reads of a dataset (core/dataset_summary.py): the shapes of a data file's
records with the line each first appears on, the first line that is no record, a model
folder's config; and where it stops reading, so that the summary says it is incomplete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ampfleet.core import dataset_summary
from ampfleet.core.archives import ArchiveLimits, inspect_archive
from ampfleet.core.dataset_summary import summarize
from tests.support.archives import zip_of

LIMITS = ArchiveLimits(max_files=100, max_unpacked_bytes=1 << 20)


def summary_of(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    found = summarize(path, name, None)
    assert found is not None
    return dict(found["records"])


def test_each_shape_is_listed_once_with_the_line_it_first_appears_on(tmp_path: Path) -> None:
    lines = [
        '{"prompt": "a", "completion": "b"}',
        "",
        '{"text": "c"}',
        '{"prompt": "d", "completion": "e"}',
        '{"text": 4}',
    ]
    summary = summary_of(tmp_path, "train.jsonl", "\n".join(lines) + "\n")
    assert summary["records"] == 4
    assert summary["shapes"] == [
        {"fields": {"prompt": "string", "completion": "string"}, "line": 1},
        {"fields": {"text": "string"}, "line": 3},
        {"fields": {"text": "integer"}, "line": 5},
    ]
    assert (summary["problem"], summary["complete"]) == (None, True)
    # The first line that is no record ends the reading, as it ends the ranks'.
    broken = summary_of(tmp_path, "more.jsonl", '{"text": "a"}\n{"text": \n{"text": 1}\n')
    assert broken["problem"]["line"] == 2
    assert broken["problem"]["message"].startswith("not JSON (")
    assert broken["shapes"] == [{"fields": {"text": "string"}, "line": 1}]


def test_a_csv_rows_cells_are_strings_an_empty_one_empty_a_missing_one_absent(
    tmp_path: Path,
) -> None:
    summary = summary_of(tmp_path, "train.CSV", "text,label\nab,x\n,y\nabc\n\nabd,z,extra\n")
    assert summary["kind"] == "csv"
    assert summary["header"] == ["text", "label"]
    assert summary["shapes"] == [
        {"fields": {"text": "string", "label": "string"}, "line": 2},
        {"fields": {"text": "empty", "label": "string"}, "line": 3},
        {"fields": {"text": "string"}, "line": 4},
    ]
    assert summary["records"] == 4  # the blank line is no row; a cell past the header no field


def test_reading_stops_where_a_summary_would_grow_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    varied = "".join(json.dumps({f"f{i}": 1}) + "\n" for i in range(40))
    summary = summary_of(tmp_path, "varied.jsonl", varied)
    assert len(summary["shapes"]) == dataset_summary.MAX_SHAPES
    assert (summary["records"], summary["complete"]) == (dataset_summary.MAX_SHAPES, False)
    monkeypatch.setattr(dataset_summary, "MAX_SCAN_BYTES", 100)
    long = summary_of(tmp_path, "long.jsonl", '{"text": "abcdefgh"}\n' * 20)
    assert (long["records"], long["complete"]) == (4, False)
    assert summary_of(tmp_path, "short.jsonl", '{"text": "a"}\n')["complete"] is True


def test_not_utf8_is_the_files_problem(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_bytes(b'{"text": "a"}\n\xff\xfe\n')
    found = summarize(path, "train.jsonl", None)
    assert found is not None
    assert found["records"]["problem"]["message"].startswith("not UTF-8 text")
    assert summarize(path, "notes.txt", None) is None  # no data file a recipe reads


def test_a_model_folders_config_is_read_from_the_archive(tmp_path: Path) -> None:
    def model(config: bytes) -> dict[str, Any] | None:
        path = tmp_path / "model.zip"
        path.write_bytes(zip_of({"config.json": config, "model.safetensors": b"w"}))
        _, entries = inspect_archive(path, LIMITS)
        found = summarize(path, None, entries)
        return None if found is None else found["model"]

    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8}
    assert model(json.dumps(config).encode()) == {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
    }
    assert model(b"[1]") == {"problem": "config.json is not a JSON object"}
    assert model(b'{"architectures": "Llama"}') == {
        "problem": "config.json: architectures is not a list of class names"
    }
    assert model(b'{"model_type": 3}') == {"model_type": None, "architectures": None}
    path = tmp_path / "data.zip"
    path.write_bytes(zip_of({"nested/config.json": b"{}"}))
    assert summarize(path, None, inspect_archive(path, LIMITS)[1]) is None
