"""`ampfleet init --script`: the project it writes runs as it is under a bare torchrun (2
gloo ranks), under the platform's script rank (`run-local`, with the job's AMPFLEET_*
variables), and its ampfleet.train variant runs in a run folder as script mode prepares it;
both specs validate and pack what their commands run."""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from ampfleet.core.spec import command_script
from ampfleet.sdk.flows import check_before_upload
from ampfleet.sdk.packing import pack_folder
from tests.support.cli import cli
from tests.support.localranks import run_ranks
from tests.support.training import records, script_run_folder

STEPS = 6
WEIGHTS = {"0.weight", "0.bias", "2.weight", "2.bias"}


def plain_environment() -> dict[str, str]:
    """This machine's environment without any of the platform's variables: a script run
    outside ampfleet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPFLEET_")}
    return {**env, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init-script")
    made = cli("init", "--script", "my-script", cwd=root)
    assert made.returncode == 0, made.stderr
    assert "torchrun --standalone --nproc-per-node 2 train.py" in made.stdout
    return root / "my-script"


def test_train_py_runs_under_a_bare_torchrun_and_saves_its_model(project: Path) -> None:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    ran = subprocess.run(
        [*launcher, "--standalone", "--nproc-per-node", "2", "train.py", "--steps", str(STEPS)],
        cwd=project,
        env=plain_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"step {STEPS}/{STEPS} loss=" in ran.stdout
    weights = torch.load(project / "outputs" / "model.pt", weights_only=True)
    assert set(weights) == WEIGHTS
    assert weights["0.weight"].shape == (64, 16)  # the script's defaults


def test_train_py_takes_the_jobs_variables_under_the_script_rank(project: Path) -> None:
    spec = yaml.safe_load((project / "job.yaml").read_text())
    spec["hyperparameters"] = {"hidden": 8}
    spec["stop"] = {"max_steps": 4}
    (project / "short.yaml").write_text(yaml.safe_dump(spec))
    kept = project.parent / "kept"
    ran = cli("run-local", "short.yaml", "--code", ".", "--procs", "2", "--keep", str(kept),
              cwd=project)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "step 4/4 loss=" in ran.stdout  # AMPFLEET_MAX_STEPS
    assert "wrote outputs/model.pt" in ran.stdout  # into AMPFLEET_OUTPUT_DIR
    (saved,) = kept.glob("runs/*/attempt-1/node-0/outputs/model.pt")
    assert torch.load(saved, weights_only=True)["0.weight"].shape == (8, 16)


@pytest.mark.parametrize("name", ["job.yaml", "job-session.yaml"])
def test_the_specs_validate_and_pack_what_their_commands_run(project: Path, name: str) -> None:
    spec = check_before_upload(yaml.safe_load((project / name).read_text()), with_code=True)
    assert spec.is_script
    assert spec.code is not None
    assert spec.code.command is not None
    (project / "outputs").mkdir(exist_ok=True)
    (project / "outputs" / "notes.txt").write_text("a local run's")
    packed = pack_folder(project, project.parent / f"{name}.tar.gz")
    files = {path for path, _size in packed.files}
    assert command_script(spec.code.command) in files
    assert not any(path.startswith("outputs/") for path in files)


def test_the_readme_quotes_the_scripts_as_they_are(project: Path) -> None:
    """Each line of the README's two listings is a line of the script it stands for."""
    listings = re.findall(r"```python\n(.*?)```", (project / "README.md").read_text(), re.S)
    assert len(listings) == 2
    for listing, script in zip(listings, ("train.py", "train_session.py"), strict=True):
        lines = {line.strip() for line in (project / script).read_text().splitlines()}
        for line in listing.splitlines():
            assert line.strip() in lines, (script, line)


def session_rank(rank: int, world_size: int, script: str, run_dir: str) -> dict[str, Any]:
    """A rank of train_session.py with script mode's environment (the process group is
    up already: the session takes it)."""
    job = json.loads(Path(run_dir, "job.json").read_text())
    output_dir = Path(run_dir, "outputs")
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "AMPFLEET_RUN_DIR": run_dir,
            "AMPFLEET_OUTPUT_DIR": str(output_dir),
            "AMPFLEET_CHECKPOINT_DIR": job["checkpoint_dir"],
            "AMPFLEET_HYPERPARAMETERS": json.dumps(job["spec"]["hyperparameters"]),
            "AMPFLEET_MAX_STEPS": str(job["spec"]["stop"]["max_steps"]),
            "AMPFLEET_JOB_ID": job["job_id"],
            "AMPFLEET_ATTEMPT": str(job["attempt"]),
        }
    )
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")
    return {"saved": sorted(str(p.name) for p in output_dir.iterdir())}


def test_train_session_py_runs_in_a_script_run_folder(project: Path, tmp_path: Path) -> None:
    spec = yaml.safe_load((project / "job-session.yaml").read_text())
    del spec["code"], spec["name"]  # the helper's bundle; what it runs is given here
    spec["hyperparameters"] = {"hidden": 8}
    spec["stop"] = {"max_steps": STEPS}
    spec["resources"] = {"accelerator": "cpu"}
    run_dir = script_run_folder(tmp_path, **spec)
    results = run_ranks(session_rank, 2, str(project / "train_session.py"), str(run_dir.path))
    assert results[0]["saved"] == ["model.pt"]
    found = records(run_dir.path)
    prepared = [r for r in found if r["kind"] == "setup"][-1]
    assert (prepared["compute_dtype"], prepared["reduction_dtype"]) == ("bf16", "bf16")
    (metrics,) = [r for r in found if r["kind"] == "metrics"]
    assert metrics["step"] == STEPS
    assert {"loss", "accuracy", "allreduce_bytes"} <= metrics["values"].keys()
    checkpoints = [r["step"] for r in found if r.get("artifact_kind") == "checkpoint"]
    assert checkpoints == [STEPS]
    weights = torch.load(run_dir.path / "outputs" / "model.pt", weights_only=True)
    assert set(weights) == WEIGHTS  # gathered without DDP's prefix, as train.py saves it
    assert weights["0.weight"].shape == (8, 16)
