"""Bring your own model, as a new user does it from a shell: `ampfleet init` writes a recipe
project, the test makes a CSV dataset, `ampfleet submit --code . --data train=...` packs and
uploads both and follows the job (2 ranks, bf16, in the bubblewrap sandbox: the node's warm
one, given the bundle and the dataset as it takes the job) to SUCCEEDED, and the model and
the file the recipe wrote to its output folder download from the API."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml

from ampfleet.core.sandbox import bubblewrap_problem
from tests.conftest import FleetFactory
from tests.support.fleet import fleet_cli, start_message, warm_sandbox_ready

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
]
ROWS = 600


def three_clouds(path: Path) -> None:
    """Three features, three classes, well apart: a recipe that trains gets them right."""
    generator = random.Random(7)
    lines = ["a,b,c,label"]
    for _ in range(ROWS):
        label = generator.randrange(3)
        centre = [4.0 * (label == axis) for axis in range(3)]
        lines.append(",".join(f"{generator.gauss(c, 1.0):.3f}" for c in centre) + f",{label}")
    path.write_text("\n".join(lines) + "\n")


def test_an_init_project_with_its_dataset_trains_and_its_outputs_download(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = make_fleet("embedded", cpu_slots=2, extra_env={"AMPFLEET_WARM_SANDBOX": "always"})
    made = fleet_cli(fleet, "init", "my-model", "--dir", str(tmp_path / "my-model"), cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    project = tmp_path / "my-model"
    spec = yaml.safe_load((project / "job.yaml").read_text())
    spec["hyperparameters"].update(features=3, classes=3)
    (project / "job.yaml").write_text(yaml.safe_dump(spec))
    three_clouds(tmp_path / "clouds.csv")

    fleet.wait_until(lambda: warm_sandbox_ready(fleet), timeout=180, what="a warm sandbox")
    submitted = fleet_cli(
        fleet,
        "submit",
        "job.yaml",
        "--code",
        ".",
        "--data",
        f"train={tmp_path / 'clouds.csv'}",
        "--follow",
        "--verbose",
        cwd=project,
    )
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output + fleet.logs()
    assert "left out data/" in output  # the project's .ampignore
    job_id = re.search(r"submitted (job_\w+)", output).group(1)
    job = fleet.job(job_id)
    assert job["state"] == "SUCCEEDED"
    assert job["latest_metrics"]["val_accuracy"] >= 0.9
    assert job["spec"]["inputs"]["train"]["name"] == "train"
    assert job["spec"]["code"]["entrypoint"] == "my_model.recipe:recipe"
    started = [e for e in fleet.events(job_id) if e["to_state"] == "RUNNING"]
    assert started[0]["message"].startswith("2 ranks on gloo")
    assert job["precision"]["effective"] == "bf16"
    assert start_message(fleet, job_id).startswith("warm start in a sandbox made before it")

    out = tmp_path / "downloaded"
    for args in ([], ["--name", "outputs/data_summary.json"]):
        fetched = fleet_cli(fleet, "download", job_id, "-o", str(out), *args, cwd=tmp_path)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert (out / "model.safetensors").stat().st_size > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert "my_model.recipe:recipe" in json.dumps(manifest)
    summary = json.loads(next(out.rglob("data_summary.json")).read_text())
    assert summary["rows"] == ROWS
