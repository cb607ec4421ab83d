"""`ampfleet artifacts` and `ampfleet download` against a live API (in-process CliRunner)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ampfleet.cli import app as cli
from tests.support.sdk_api import BLOB, MANIFEST
from tests.support.sdk_api import downloads_api as api

__all__ = ["api"]  # the fixture: a live API with a job's model, manifest and checkpoint

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def args(api: dict[str, Any]) -> list[str]:
    return ["--url", api["url"], "--key", api["key"]]


def test_artifacts_table_and_downloads(
    api: dict[str, Any], args: list[str], tmp_path: Path
) -> None:
    listed = runner.invoke(cli, ["artifacts", api["job_id"], *args])
    assert listed.exit_code == 0, listed.output
    for name in ("model.safetensors", "manifest.json", "checkpoint-000000020"):
        assert name in listed.output

    model = runner.invoke(cli, ["download", api["job_id"], "-o", str(tmp_path), *args])
    assert model.exit_code == 0, model.output
    assert (tmp_path / "model.safetensors").read_bytes() == BLOB
    assert (tmp_path / "manifest.json").read_bytes() == MANIFEST
    assert "saved" in model.output

    checkpoint = runner.invoke(
        cli, ["download", api["job_id"], "--checkpoint", "20", "-o", str(tmp_path), *args]
    )
    assert checkpoint.exit_code == 0, checkpoint.output
    assert (tmp_path / "checkpoint-000000020.tar").read_bytes() == BLOB[:70000]

    missing = runner.invoke(cli, ["download", api["job_id"], "--checkpoint", "7", *args])
    assert missing.exit_code == 1
    assert "no stored checkpoint at step 7" in missing.output
