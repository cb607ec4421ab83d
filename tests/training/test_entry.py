"""A rank's entry point reads the job file the node agent writes (the spec as the API stored
it, every default and every input resolved) as a typed spec, and trains from it; a recipe
that cannot be resolved fails the rank before it meets its peers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ampfleet.api.jobs.service import resolve
from ampfleet.core.spec import JobSpec
from ampfleet.workers.rundir import RecordReader, RunDir
from ampfleet.workers.training.entry import StoredSpec
from tests.support.fleet import free_port


def test_a_rank_trains_from_the_job_file_the_agent_writes(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {
            "recipe": "digits",
            "hyperparameters": {"hidden": 16},
            "resources": {"accelerator": "cpu"},
            "precision": "fp32",
            "allreduce_dtype": "fp32",
            "stop": {"max_steps": 4},
            "log_every_steps": 2,
            "checkpoint": {"every_steps": 2, "keep_last": 1},
        }
    )
    run_dir = RunDir.for_attempt(tmp_path / "runs", "job_entry", 0, 0)
    run_dir.path.mkdir(parents=True)
    job = {
        "job_id": "job_entry",
        "attempt": 0,
        "spec": resolve(spec),
        "checkpoint_dir": str(tmp_path / "checkpoints"),
        "process_group_timeout_s": 60,
        "metrics_flush_s": 0.0,
        "inputs": {},
        "node": "node-a",
    }
    run_dir.job_file.write_text(json.dumps(job))
    rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    finished = subprocess.run(
        [sys.executable, "-m", "ampfleet.workers.training.entry", str(run_dir.path)],
        env={**os.environ, **rank, **address},
        timeout=300,
        check=False,
    )
    logs = "".join(path.read_text() for path in sorted(run_dir.logs_dir.glob("*")))
    assert finished.returncode == 0, logs
    records = RecordReader(run_dir.events_file).read_new()
    (started,) = [r for r in records if r["kind"] == "started"]
    assert (started["total_steps"], started["precision"], started["backend"]) == (4, "fp32", "gloo")
    reported = [r["step"] for r in records if r["kind"] == "metrics" and "loss" in r["values"]]
    assert reported == [2, 4]
    checkpoints = [r["step"] for r in records if r.get("artifact_kind") == "checkpoint"]
    assert checkpoints == [2, 4]
    assert records[-1]["kind"] == "finished"


def test_the_stored_spec_of_a_bundled_job_reads_as_typed() -> None:
    submitted = JobSpec.model_validate(
        {
            "code": {"bundle": "bnd_" + "a" * 26, "entrypoint": "my_pkg.recipe:recipe"},
            "inputs": {"train": "digits@2"},
            "precision": "bf16",
        }
    )
    stored = submitted.model_dump(mode="json")
    # What the API resolves for the node: where the bundle and each input come from.
    stored["code"]["sha256"] = "0" * 64
    stored["inputs"] = {"train": {"dataset": "dst_1", "name": "digits", "version": 2}}
    spec = StoredSpec.model_validate(stored)
    assert spec.code is not None
    assert (spec.code.entrypoint, spec.recipe) == ("my_pkg.recipe:recipe", None)
    assert (spec.precision, spec.stop.max_steps) == ("bf16", 100)
    # A local run (ampfleet run-local) names its folder, and keeps its inputs as written.
    stored["code"] = {**stored["code"], "bundle": "local folder /src", "sha256": "not uploaded"}
    stored["inputs"] = {"train": "digits@2"}
    local = StoredSpec.model_validate(stored).code
    assert local is not None
    assert (local.bundle, local.entrypoint) == ("local folder /src", "my_pkg.recipe:recipe")


BROKEN_RECIPES = {
    "a package not installed": (
        "import not_a_package_anyone_installed\n",
        {},
        "ModuleNotFoundError: No module named 'not_a_package_anyone_installed'",
    ),
    "an exception at import": (
        "raise RuntimeError('the recipe module is broken')\n",
        {},
        "RuntimeError: the recipe module is broken",
    ),
    "no RecipeDefinition": (
        "recipe = 42\n",
        {},
        "BundleEntrypointError: entrypoint my_pkg.recipe:recipe is a int",
    ),
    "hyperparameters its model refuses": (
        "from ampfleet.recipes.digits import recipe\n",
        {"hidden": "wide"},
        "ValidationError",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_RECIPES))
def test_a_recipe_that_does_not_resolve_fails_the_rank_before_it_meets_its_peers(
    tmp_path: Path, case: str
) -> None:
    """Rank 0 of two, and rank 1 never comes: the rank reports the recipe's error at once
    rather than waiting at the rendezvous for a peer (here for ever: its timeout is longer
    than the test waits)."""
    source, hyperparameters, words = BROKEN_RECIPES[case]
    code_dir = tmp_path / "code"
    (code_dir / "my_pkg").mkdir(parents=True)
    (code_dir / "my_pkg" / "recipe.py").write_text(source)
    spec = JobSpec.model_validate(
        {
            "code": {"bundle": "bnd_" + "a" * 26, "entrypoint": "my_pkg.recipe:recipe"},
            "hyperparameters": hyperparameters,
            "resources": {"accelerator": "cpu", "procs_per_node": 2},
        }
    )
    job: dict[str, Any] = {
        "job_id": "job_entry",
        "attempt": 1,
        "spec": resolve(spec),
        "code_dir": str(code_dir),
        "checkpoint_dir": str(tmp_path / "checkpoints"),
        "process_group_timeout_s": 3600,
        "metrics_flush_s": 0.0,
        "inputs": {},
        "node": "node-a",
    }
    run_dir = RunDir.for_attempt(tmp_path / "runs", "job_entry", 1, 0)
    run_dir.path.mkdir(parents=True)
    run_dir.job_file.write_text(json.dumps(job))
    rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    failed = subprocess.run(
        [sys.executable, "-m", "ampfleet.workers.training.entry", str(run_dir.path)],
        env={**os.environ, **rank, **address},
        timeout=240,
        check=False,
    )
    assert failed.returncode == 1
    (report,) = run_dir.failures()
    assert words in f"{report['type']}: {report['message']}", report
    assert report["rank"] == 0
