"""The progress bar of `ampfleet submit --follow`: rich fills a bar whose total it does not
know, so a job that failed at step 0 without a step count looked done; now only a job that
succeeded ends with a full bar."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress, TextColumn

from ampfleet.cli.common import StepsBar

WIDTH = 20


def drawn(state: str, step: int, total: int | None) -> str:
    """The bar as the follow leaves it on the screen when the stream ends."""
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    columns = (
        TextColumn("{task.description:<10}"),
        StepsBar(bar_width=WIDTH),
        MofNCompleteColumn(),
    )
    with Progress(*columns, console=console, auto_refresh=False) as progress:
        task = progress.add_task("QUEUED", total=None)
        progress.update(task, description=state, completed=step, total=total)
    return out.getvalue().rstrip().splitlines()[-1]


def filled(line: str) -> int:
    return line.count("━")


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "TIMED_OUT"])
def test_a_job_that_ended_at_step_0_without_a_total_shows_an_empty_bar(state: str) -> None:
    line = drawn(state, 0, None)
    assert filled(line) == 0, line
    assert line.endswith("0/?")


def test_a_known_total_fills_its_share() -> None:
    assert filled(drawn("FAILED", 0, 100)) == 0
    assert filled(drawn("FAILED", 50, 100)) == WIDTH // 2
    assert filled(drawn("SUCCEEDED", 100, 100)) == WIDTH


def test_a_job_that_succeeded_without_a_total_is_full() -> None:
    line = drawn("SUCCEEDED", 300, None)
    assert filled(line) == WIDTH
    assert line.endswith("300/?")


def test_a_running_job_without_a_total_pulses() -> None:
    """rich's own animation while the job runs: it has no share to show yet."""
    assert filled(drawn("RUNNING", 3, None)) > 0
