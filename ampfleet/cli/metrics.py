"""`ampfleet metrics JOB` and `ampfleet diagnose JOB`: a job's numbers from a shell. The
summary's best is an objective's only (the API's goals); a plot draws one chart per series,
a loss on a log axis unless `--linear`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ampfleet.cli import plot as charts
from ampfleet.cli.common import (
    JobId,
    Key,
    Url,
    api_client,
    best_of,
    number,
    print_table,
    stdout_console,
)
from ampfleet.sdk import MetricSeries

PANEL = "Use the API"


def _summary(series: list[MetricSeries]) -> None:
    rows = [
        (
            one.name,
            str(one.summary.count),
            number(one.summary.last, ".4g"),
            f"{one.summary.min:.4g}",
            f"{one.summary.max:.4g}",
            best_of(one),
        )
        for one in series
    ]
    print_table(("METRIC", "POINTS", "LAST", "MIN", "MAX", "BEST"), rows, "no metrics")


def _plot_target(value: str | None) -> str | None:
    """`--plot`: '-', or a PNG whose folder exists (checked before anything is fetched)."""
    if value is None or value == "-":
        return value
    folder = Path(value).parent
    if not folder.is_dir():
        raise typer.BadParameter(f"cannot write {value}: the folder {folder} does not exist")
    if Path(value).is_dir():
        raise typer.BadParameter(f"{value} is a folder; give the PNG file's name")
    return value


def metrics(
    job_id: JobId,
    names: Annotated[
        list[str] | None,
        typer.Option(
            "--names",
            "-n",
            help="Metric names, comma-separated or the option repeated [default: all; "
            "a plot: loss and val_loss]",
        ),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option(
            help="Plot to FILE.png (matplotlib), or '-' in the terminal.", callback=_plot_target
        ),
    ] = None,
    log: Annotated[
        bool | None,
        typer.Option(
            "--log/--linear",
            help="The plot's value axis [default: log for losses (series whose goal is "
            "min), linear for the others]",
            show_default=False,
        ),
    ] = None,
    max_points: Annotated[int, typer.Option(min=2, help="Points per series, at most.")] = 1000,
    url: Url = None,
    key: Key = None,
) -> None:
    """A summary of each metric series; with --plot, their curves (one chart each)."""
    wanted = ",".join(names) if names else (None if plot is None else "loss,val_loss")
    with api_client(url, key) as client:
        series = client.metrics(job_id, names=wanted, max_points=max_points).series
        console = stdout_console()
        if not series:
            console.print(f"no metrics for {job_id}" + (f" named {wanted}" if wanted else ""))
            raise typer.Exit(1 if plot else 0)
        if plot is None:
            _summary(series)
        elif plot == "-":
            for one in series:
                typer.echo(charts.text_chart(one, log=log))
        else:
            _save_png(series, Path(plot), job_id, log)
            console.print(f"wrote {plot}")


def diagnose(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Why the job's accelerators idle: where its steps' time goes, and what to change."""
    with api_client(url, key) as client:
        diagnosis = client.diagnosis(job_id)
    console = stdout_console()
    breakdown = diagnosis.breakdown
    if not breakdown.steps:
        console.print(f"{job_id} has reported no steps yet: nothing to diagnose")
        return
    shares = ", ".join(f"{name} {share:.0%}" for name, share in breakdown.shares.items())
    mfu = f", MFU {breakdown.mfu:.1%}" if breakdown.mfu is not None else ""
    console.print(
        f"last {breakdown.steps} steps to step {breakdown.to_step}: "
        f"{number(breakdown.step_time_s, '.3f')} s per step ({shares}){mfu}"
    )
    if not diagnosis.findings:
        console.print("no findings: nothing keeps the devices waiting")
    for finding in diagnosis.findings:
        console.print(f"[{finding.severity}] {finding.title}", markup=False)
        console.print(f"  {finding.evidence}", markup=False)
        console.print(f"  -> {finding.advice}", markup=False)


def _save_png(series: list[MetricSeries], path: Path, title: str, log: bool | None) -> None:
    try:
        charts.png_chart(series, path, title, log=log)
    except ImportError:
        # Escaped: rich would take `[plot]` for markup and print `ampfleet` alone.
        hint = escape("pip install 'ampfleet[plot]'")
        Console(stderr=True).print(
            f"[red]error:[/red] a PNG needs matplotlib: {hint} "
            "(or use --plot - for a chart in the terminal)"
        )
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.command("metrics", rich_help_panel=PANEL)(metrics)
    app.command("diagnose", rich_help_panel=PANEL)(diagnose)
