"""`ampfleet recipes` and `ampfleet recipes NAME` against a live API (in-process CliRunner)."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from ampfleet.cli import app as cli
from tests.support.sdk_api import recipes_api as api

__all__ = ["api"]  # the fixture: a live API and a read key

runner = CliRunner(env={"COLUMNS": "250"})


def test_the_recipes_table_names_each_recipe_with_its_size(api: dict[str, Any]) -> None:
    shown = runner.invoke(cli, ["recipes", "--url", api["url"], "--key", api["key"]])
    assert shown.exit_code == 0, shown.output
    for text in ("NAME", "DESCRIPTION", "PARAMETERS", "digits", "gpt-bench", "85.0k"):
        assert text in shown.output


def test_one_recipe_shows_its_hyperparameters(api: dict[str, Any]) -> None:
    shown = runner.invoke(cli, ["recipes", "digits", "--url", api["url"], "--key", api["key"]])
    assert shown.exit_code == 0, shown.output
    hidden = next(line for line in shown.output.splitlines() if " hidden " in line)
    for text in ("integer", "256", "[8, 4096]", "Width of the two hidden layers."):
        assert text in hidden
    dropout = next(line for line in shown.output.splitlines() if " dropout " in line)
    assert "[0.0, 1.0)" in dropout


def test_an_unknown_recipe_ends_with_its_message(api: dict[str, Any]) -> None:
    shown = runner.invoke(cli, ["recipes", "nope", "--url", api["url"], "--key", api["key"]])
    assert shown.exit_code == 1
    assert "recipe nope is not installed" in shown.output
