"""`ampfleet checkpoints`, `ampfleet samples` and `ampfleet export-checkpoint` (and the async
SDK's samples and export) against a live API: a job's checkpoints with the metrics of their
steps, its evaluations' samples, and the export of a checkpoint queued as a job."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from ampfleet import AsyncClient, Client
from ampfleet.cli import app as cli
from ampfleet.core.artifact_names import samples_name
from tests.conftest import KeyFactory
from tests.support.factories import add_artifact, job_spec, platform_checkpoint, report_step
from tests.support.live_api import serving

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def api(app: FastAPI, make_key: KeyFactory, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A live API; a job with a checkpoint of step 20, its metrics and a sample there."""
    with serving(app) as base_url, Client(base_url, make_key("alpha", "write")) as writer:
        job = writer.submit(job_spec()).model_dump(mode="json")
        report_step(job["id"], 1, 20, {"loss": 0.25, "val_loss": 0.5})
        platform_checkpoint(tmp_path, job, 20)
        text = b"### prompt\necho ab:\n### completion\nab\n"
        add_artifact(tmp_path, job, samples_name(20), "sample", text, 20)
        yield {"url": base_url, "key": writer.api_key, "job_id": job["id"]}


def test_checkpoints_samples_and_an_export_from_a_shell(api: dict[str, Any]) -> None:
    args = [api["job_id"], "--url", api["url"], "--key", api["key"]]
    listed = runner.invoke(cli, ["checkpoints", *args])
    assert listed.exit_code == 0, listed.output
    assert "loss 0.25, val_loss 0.5" in listed.output

    shown = runner.invoke(cli, ["samples", *args])
    assert shown.exit_code == 0, shown.output
    assert "step 20" in shown.output
    assert "### prompt\necho ab:\n### completion\nab" in shown.output

    exported = runner.invoke(cli, ["export-checkpoint", *args[:1], "20", *args[1:]])
    assert exported.exit_code == 0, exported.output
    assert "exporting in job_" in exported.output
    missing = runner.invoke(cli, ["export-checkpoint", *args[:1], "7", *args[1:]])
    assert missing.exit_code == 1
    assert "no stored checkpoint at step 7" in missing.output


def test_the_async_client_lists_samples_and_exports(api: dict[str, Any]) -> None:
    async def both() -> tuple[list[int], dict[str, Any]]:
        async with AsyncClient(api["url"], api["key"]) as client:
            samples = await client.samples(api["job_id"])
            export = await client.export_checkpoint(api["job_id"], 20, dtype="bf16")
            return [s.step for s in samples], export.spec

    steps, spec = asyncio.run(both())
    assert steps == [20]
    assert (spec["stop"]["max_steps"], spec["export"]["dtype"]) == (0, "bf16")
    assert spec["init_from"]["job"] == api["job_id"]
