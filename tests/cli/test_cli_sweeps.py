"""`ampfleet sweep --follow`, `ampfleet sweeps` and `sweep-status` against a live API
(in-process CliRunner), the controller's passes run beside it as a scheduler would."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import yaml
from sqlalchemy import select
from typer.testing import CliRunner

from ampfleet.cli import app as cli
from ampfleet.core.db import session_scope
from ampfleet.core.models import Sweep
from tests.support.sdk_api import sweeps_api as api
from tests.support.sweeps import SPEC, finish_trials

__all__ = ["api"]  # the fixture: a live API and a write key

runner = CliRunner(env={"COLUMNS": "250"})


def _where(api: dict[str, str]) -> list[str]:
    return ["--url", api["url"], "--key", api["key"]]


def _run_the_first_sweep(deadline_s: float = 60) -> None:
    """Waits for the sweep the CLI starts, then runs its trials to their end."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            sweep_id = session.scalar(select(Sweep.id))
        if sweep_id is not None:
            finish_trials(sweep_id)
            return
        time.sleep(0.05)


def test_follow_prints_the_events_then_the_precision_report(
    api: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SPEC))
    controller = threading.Thread(target=_run_the_first_sweep)
    controller.start()
    try:
        args = ["sweep", str(tmp_path / "sweep.yaml"), "--follow"]
        shown = runner.invoke(cli, [*args, *_where(api)])
    finally:
        controller.join()
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    started = [line for line in lines if line.startswith("sweep.trial_started")]
    assert len(started) == 2
    assert any(line.startswith("sweep.trial_completed  trial 1 complete: 0.6") for line in lines)
    assert any(line.startswith("sweep.succeeded") for line in lines)
    assert "precision report" in shown.output
    assert "best: trial 1" in shown.output

    listed = runner.invoke(cli, ["sweeps", *_where(api)])
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if "swp_" in line)
    for text in ("default", "SUCCEEDED", "2 complete", "its trial budget spent"):
        assert text in row
    sweep_id = row.split()[1]
    status = runner.invoke(cli, ["sweep-status", sweep_id, *_where(api)])
    assert status.exit_code == 0, status.output
    assert f"sweep {sweep_id} SUCCEEDED" in status.output
    report = [line for line in status.output.splitlines() if " complete " in line and "/" in line]
    assert report, status.output


def test_no_sweeps_says_so(api: dict[str, str]) -> None:
    listed = runner.invoke(cli, ["sweeps", *_where(api)])
    assert listed.exit_code == 0, listed.output
    assert "no sweeps" in listed.output
