"""`ampfleet init` and `ampfleet run-local`: the project it writes runs as it is, here, with
the platform's own loop on 2 gloo ranks; a misspelt hyperparameter or a missing entrypoint
fails the way a job would, in words, with exit 1; init refuses to overwrite a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli import cli


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init")
    made = cli("init", "my-model", cwd=root)
    assert made.returncode == 0, made.stderr
    assert "run-local job.yaml" in made.stdout
    return root / "my-model"


def test_the_written_project_runs_locally_on_two_ranks(project: Path) -> None:
    ran = cli(
        "run-local",
        "job.yaml",
        "--code",
        ".",
        "--data",
        "train=data/example.csv",
        "--steps",
        "30",
        "--procs",
        "2",
        cwd=project,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "rank 0/2 on cpu (gloo): bf16 compute, bf16 AllReduce, 30 steps" in ran.stdout
    assert "step 30/30 loss" in ran.stdout
    assert "val_accuracy" in ran.stdout
    assert "wrote outputs/data_summary.json" in ran.stdout
    assert "wrote export/model.safetensors" in ran.stdout
    assert "Traceback" not in ran.stdout + ran.stderr


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"hyperparameters": {"hiden": 3}}, "hiden"),
        ({"code": {"entrypoint": "my_model.nothing:recipe"}}, "my_model.nothing"),
    ],
)
def test_a_broken_recipe_fails_in_words(project: Path, change: dict, said: str) -> None:
    spec = {**yaml.safe_load((project / "job.yaml").read_text()), **change}
    (project / "broken.yaml").write_text(yaml.safe_dump(spec))
    ran = cli("run-local", "broken.yaml", "--code", ".", "--steps", "5", cwd=project)
    assert ran.returncode == 1
    assert "failed:" in ran.stdout
    assert said in ran.stdout


def test_bad_arguments_are_one_line_errors(project: Path) -> None:
    again = cli("init", "my-model", cwd=project.parent)
    assert again.returncode == 1
    assert "exists already" in again.stderr
    for args, said in (
        (["--code", "nowhere"], "not a folder"),
        (["--code", ".", "--data", "train"], "give NAME=PATH"),
        (["--code", ".", "--data", "train=missing.csv"], "local files and folders only"),
        ([], "give its folder with --code"),
    ):
        ran = cli("run-local", "job.yaml", *args, cwd=project)
        assert ran.returncode == 1, args
        assert said in ran.stderr, (args, ran.stderr)
        assert "Traceback" not in ran.stderr
