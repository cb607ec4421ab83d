"""The terminal chart of `ampfleet metrics --plot -`, drawn from series as the API answers
them: a log axis by default for a loss (its goal is min), linear for the rest."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from ampfleet.cli import metrics as cli_metrics
from ampfleet.cli.plot import HEIGHT, log_axis, text_chart
from ampfleet.sdk.models import MetricSeries


def series(name: str, values: list[float], goal: str | None) -> MetricSeries:
    summary: dict[str, Any] = {
        "count": len(values),
        "last_step": len(values),
        "min": min(values),
        "max": max(values),
        "goal": goal,
        "best": None if goal is None else min(values) if goal == "min" else max(values),
    }
    points = [{"step": step, "value": value} for step, value in enumerate(values, start=1)]
    return MetricSeries.model_validate({"name": name, "points": points, "summary": summary})


def rows_with_a_point(chart: str) -> list[int]:
    rows = chart.splitlines()[1 : 1 + HEIGHT]
    return [i for i, row in enumerate(rows) if "*" in row.split("|", 1)[1]]


FALLING = [2.3 * 10 ** (-step / 2) for step in range(12)]  # 2.3 down to 1e-6


def test_a_loss_gets_a_log_axis_that_shows_every_decade() -> None:
    loss = series("loss", FALLING, "min")
    chart = text_chart(loss, width=12)
    assert chart.splitlines()[0] == "loss (by step, log axis)"
    assert len(rows_with_a_point(chart)) == HEIGHT  # one row per point: none squashed
    top, bottom = chart.splitlines()[1], chart.splitlines()[HEIGHT]
    assert top.split("|")[0].strip() == "2.3"
    assert float(bottom.split("|")[0]) == float(f"{FALLING[-1]:.4g}")
    linear = text_chart(loss, width=12, log=False)
    assert linear.splitlines()[0] == "loss (by step)"
    assert len(rows_with_a_point(linear)) <= HEIGHT // 2  # most points squashed at the bottom


def test_other_series_are_linear_unless_asked_and_positive() -> None:
    rate = series("learning_rate", [3e-3, 2e-3, 1e-3], None)
    assert not log_axis(rate, None)
    assert log_axis(rate, True)
    assert text_chart(rate, log=True).splitlines()[0] == "learning_rate (by step, log axis)"
    skipped = series("skipped_steps", [0.0, 0.0, 1.0], None)
    assert not log_axis(skipped, True)  # a zero has no logarithm
    title = text_chart(skipped, log=True).splitlines()[0]
    assert title == "skipped_steps (by step; linear: not every value is positive)"


def test_without_matplotlib_the_hint_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`[plot]` is the extra to install, not rich markup to swallow."""
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra were not installed
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(typer.Exit) as ended:
        cli_metrics._save_png([series("loss", FALLING, "min")], tmp_path / "loss.png", "t", None)
    assert ended.value.exit_code == 1
    said = capsys.readouterr().err
    assert "pip install 'ampfleet[plot]'" in said
    assert not (tmp_path / "loss.png").exists()
