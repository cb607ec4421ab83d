"""The user commands of `ampfleet` against a running fleet (in-process through typer's
CliRunner, and once as a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from ampfleet.cli import app
from ampfleet.cli import plot as cli_plot
from tests.support.factories import job_spec
from tests.support.fleet import Fleet
from tests.support.parked import PARKED, fleet_with_parked_project

pytestmark = pytest.mark.e2e

STEPS = 30
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHART_LINES = 1 + cli_plot.HEIGHT + 2  # title, rows, axis, steps


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet_with_parked_project(tmp_path_factory.mktemp("cli-fleet")) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("specs")
    contents = {
        "ok": job_spec(name="cli", stop={"max_steps": STEPS}, log_every_steps=1),
        "fails": job_spec(name="too-big-batch", hyperparameters={"batch_size": 4096}),
        "parked": job_spec(project=PARKED, name="parked"),
        "invalid": job_spec(resources={"nodes": 0}, precision="fp8"),
    }
    paths = {}
    for name, spec in contents.items():
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(spec))
    return paths


@pytest.fixture(scope="module")
def ampfleet(fleet: Fleet) -> CliRunner:
    return CliRunner(
        env={"AMPFLEET_URL": fleet.base_url, "AMPFLEET_API_KEY": fleet.admin_key, "COLUMNS": "160"}
    )


def run(runner: CliRunner, *args: str) -> Result:
    result = runner.invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback would have been printed to the user
    return result


@pytest.fixture(scope="module")
def followed(ampfleet: CliRunner, specs: dict[str, Path]) -> tuple[Result, str]:
    """`ampfleet submit ok.yaml --follow`, once for the module, and the job's id."""
    result = run(ampfleet, "submit", str(specs["ok"]), "--follow")
    return result, result.stdout.split()[1]


def test_submit_follow_shows_progress_and_exits_0_on_success(
    followed: tuple[Result, str],
) -> None:
    result, job_id = followed
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"submitted {job_id} (QUEUED)")
    assert "STARTING -> RUNNING" in result.stdout
    assert f"{STEPS}/{STEPS}" in result.stdout  # the progress bar, as it ended
    assert "loss 0." in result.stdout or "loss 1." in result.stdout
    assert "ETA " in result.stdout  # the server's, with how far to trust it
    # It ends with the state, then the objectives as the job left them, each with its best.
    ending = result.stdout.rstrip().splitlines()
    at = ending.index(f"{job_id} SUCCEEDED")
    assert ending[at + 1] == "final metrics"
    rows = {line.split()[0]: line.split()[1:] for line in ending[at + 2 :]}
    assert sorted(rows) == ["loss", "val_accuracy", "val_loss"]  # learning_rate is no objective
    last, *best = rows["loss"]
    assert best[0::2] == ["best", "(min)", "step"]
    assert float(best[1]) <= float(last)
    assert rows["val_accuracy"][:4] == [
        rows["val_accuracy"][0],
        "best",
        rows["val_accuracy"][0],
        "(max)",
    ]


def test_submit_follow_exits_1_when_the_job_fails(
    ampfleet: CliRunner, specs: dict[str, Path]
) -> None:
    result = run(ampfleet, "submit", str(specs["fails"]), "-f")
    assert result.exit_code == 1
    assert "FAILED" in result.stdout
    assert "smaller than one batch per rank" in result.stdout


def test_status_and_list(
    ampfleet: CliRunner, followed: tuple[Result, str], specs: dict[str, Path]
) -> None:
    _, job_id = followed
    status = run(ampfleet, "status", job_id)
    assert status.exit_code == 0
    assert job_id in status.stdout
    assert "SUCCEEDED (attempt 1, priority normal)" in status.stdout
    assert f"{STEPS}/{STEPS} (100%)" in status.stdout
    assert "bf16 (requested bf16)" in status.stdout
    as_json = json.loads(run(ampfleet, "status", job_id, "--json").stdout)
    assert (as_json["id"], as_json["state"]) == (job_id, "SUCCEEDED")

    listed = run(ampfleet, "list")
    assert listed.exit_code == 0
    assert job_id in listed.stdout
    assert job_id in run(ampfleet, "list", "--state", "SUCCEEDED", "--state", "FAILED").stdout
    assert job_id not in run(ampfleet, "list", "--state", "QUEUED").stdout
    assert job_id not in run(ampfleet, "list", "--project", PARKED).stdout
    waiting = run(ampfleet, "submit", str(specs["parked"]), "--quiet").stdout.strip()
    try:
        active = run(ampfleet, "list", "--active").stdout
        assert waiting in active
        assert job_id not in active
        assert job_id in run(ampfleet, "list", "--active", "--state", "SUCCEEDED").stdout
    finally:
        run(ampfleet, "cancel", waiting)
    assert waiting not in run(ampfleet, "list", "-a").stdout


def test_logs_tail_rank_and_follow(ampfleet: CliRunner, followed: tuple[Result, str]) -> None:
    _, job_id = followed
    everything = run(ampfleet, "logs", job_id).stdout.splitlines()
    assert run(ampfleet, "logs", job_id, "--tail", "2").stdout.splitlines() == everything[-2:]
    assert run(ampfleet, "logs", job_id, "-f").stdout.splitlines() == everything  # then ends
    rank_zero = run(ampfleet, "logs", job_id, "--rank", "0").stdout.splitlines()
    assert any(line.startswith(f"[0] step {STEPS}/{STEPS} loss") for line in rank_zero)
    rank_one = run(ampfleet, "logs", job_id, "--rank", "1").stdout.splitlines()
    assert rank_one
    assert all(line.startswith("[1] ") for line in rank_one)
    assert sorted(rank_zero + rank_one) == sorted(everything)


def test_cancel(ampfleet: CliRunner, specs: dict[str, Path]) -> None:
    job_id = run(ampfleet, "submit", str(specs["parked"]), "--quiet").stdout.strip()
    assert job_id.startswith("job_")
    cancelled = run(ampfleet, "cancel", job_id)
    assert cancelled.exit_code == 0
    assert cancelled.stdout.strip() == f"{job_id} CANCELLED"
    again = run(ampfleet, "cancel", job_id)
    assert again.exit_code == 1
    assert f"job {job_id} is already CANCELLED" in again.stderr


def test_metrics_table_png_and_terminal_plot(
    ampfleet: CliRunner, followed: tuple[Result, str], tmp_path: Path
) -> None:
    _, job_id = followed
    table = run(ampfleet, "metrics", job_id, "--names", "loss,val_accuracy")
    assert table.exit_code == 0
    assert "loss" in table.stdout
    assert "val_accuracy" in table.stdout
    pytest.importorskip("matplotlib")
    png = tmp_path / "curves.png"
    plotted = run(ampfleet, "metrics", job_id, "--plot", str(png), "--names", "loss,grad_norm")
    assert plotted.exit_code == 0, plotted.output
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    terminal = run(ampfleet, "metrics", job_id, "--plot", "-")  # loss and val_loss
    assert terminal.exit_code == 0
    lines = terminal.stdout.splitlines()
    loss, val_loss = lines[:CHART_LINES], lines[CHART_LINES:]
    assert loss[0] == "loss (by step, log axis)"  # a loss: log by default
    assert sum("*" in line for line in loss) >= 2  # the curve falls through the rows
    assert loss[-1].split() == ["1", str(STEPS)]
    assert val_loss[0] == "val_loss (by step, log axis)"
    assert val_loss[-1].split() == [str(STEPS), str(STEPS)]  # evaluated at the end only
    two = run(ampfleet, "metrics", job_id, "--plot", "-", "-n", "loss", "-n", "grad_norm")
    titles = two.stdout.splitlines()[::CHART_LINES]
    assert titles == ["grad_norm (by step)", "loss (by step, log axis)"]  # in name order
    linear = run(ampfleet, "metrics", job_id, "--plot", "-", "--linear")
    assert linear.stdout.splitlines()[0] == "loss (by step)"


def test_keys_create_list_revoke(
    ampfleet: CliRunner, fleet: Fleet, followed: tuple[Result, str]
) -> None:
    created = run(ampfleet, "keys", "create", "--role", "read", "--name", "cli-reader")
    assert created.exit_code == 0
    key = created.stdout.strip()
    assert key.startswith("amp_")
    key_id = created.stderr.split()[1]
    assert key_id.startswith("key_")
    listed = run(ampfleet, "keys", "list").stdout
    assert key_id in listed
    assert "cli-reader" in listed
    as_reader = ("--url", fleet.base_url, "--key", key)
    assert run(ampfleet, "status", followed[1], *as_reader).exit_code == 0
    assert run(ampfleet, "keys", "revoke", key_id).stdout.strip() == f"revoked {key_id}"
    refused = run(ampfleet, "status", followed[1], *as_reader)
    assert refused.exit_code == 1
    assert "the API key is not valid or has been revoked" in refused.stderr


def test_errors_print_the_message_and_fields_without_a_traceback(
    ampfleet: CliRunner, fleet: Fleet, specs: dict[str, Path]
) -> None:
    invalid = run(ampfleet, "submit", str(specs["invalid"]))
    assert invalid.exit_code == 1
    assert "resources.nodes" in invalid.stderr
    assert "precision" in invalid.stderr
    missing = run(ampfleet, "status", "job_nope")
    assert (missing.exit_code, missing.stderr.strip()) == (1, "error: job job_nope not found")
    # The installed command itself, with --url and --key instead of the environment.
    flags = ["--url", fleet.base_url, "--key", "amp_not_a_key"]
    process = subprocess.run(
        [sys.executable, "-m", "ampfleet.cli", "status", "job_nope", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert process.returncode == 1
    assert "the API key is not valid or has been revoked" in process.stderr
    assert "Traceback" not in process.stderr + process.stdout
