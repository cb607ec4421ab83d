"""`ampfleet sweep sweep.yaml [--follow]` and `ampfleet sweep-status|sweep-cancel`: a sweep
from a shell, through the SDK. --follow redraws a table of the trials on every poll (Rich's
Live), then prints the best trial and the precision report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ampfleet.cli.common import PANEL, Key, Url, api_client, fail, stdout_console

SweepId = Annotated[str, typer.Argument(help="The sweep's id (swp_...).", show_default=False)]


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trials_table(sweep: dict[str, Any]) -> Table:
    objectives = [o["metric"] for o in sweep["spec"]["objectives"]]
    space = list(sweep["spec"]["space"])
    counts = ", ".join(f"{n} {state}" for state, n in sorted(sweep["counts"].items()))
    table = Table(
        "trial",
        "state",
        *space,
        *objectives,
        "samples/s",
        "reason",
        title=f"sweep {sweep['id']} {sweep['state']}" + (f" ({counts})" if counts else ""),
    )
    best = (sweep.get("best_trial") or {}).get("number")
    for trial in sweep["trials"]:
        values = trial["values"] or [None] * len(objectives)
        mark = " *" if trial["number"] == best else ""
        table.add_row(
            f"{trial['number']}{mark}",
            trial["state"],
            *(_value(trial["params"].get(name)) for name in space),
            *(_value(v) for v in values),
            _value(trial["measures"].get("samples_per_s")),
            escape(trial["reason"] or ""),
        )
    return table


def precision_table(sweep: dict[str, Any]) -> Table:
    metric = sweep["spec"]["objectives"][0]["metric"]
    table = Table("precision", "trials", "best trial", metric, "samples/s", "slot-s")
    table.title = "precision report"
    for row in sweep["precision_report"]:
        table.add_row(
            row["precision"],
            str(row["trials"]),
            _value(row["best_trial"]),
            _value(row["value"]),
            _value(row["samples_per_s"]),
            _value(row["slot_s"]),
        )
    return table


def _show(sweep: dict[str, Any]) -> Group:
    parts: list[Any] = [trials_table(sweep)]
    if sweep["precision_report"]:
        parts.append(precision_table(sweep))
    return Group(*parts)


def sweep(
    spec: Annotated[Path, typer.Argument(help="The sweep spec: a YAML (or JSON) file.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="A live table of trials until it ends.")
    ] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Start a sweep; with --follow, exit 0 only if it SUCCEEDED."""
    console = stdout_console()
    with api_client(url, key) as client:
        started = client.sweep(spec)
        console.print(f"sweep {started['id']} {started['state']}")
        if not follow:
            return
        with Live(_show(started), console=console, refresh_per_second=2) as live:
            done = client.wait_sweep(started["id"], on_poll=lambda s: live.update(_show(s)))
    if done["state"] != "SUCCEEDED":
        fail(f"sweep {done['id']} ended {done['state']}: {done['reason']}")
    best = done.get("best_trial")
    if best:
        console.print(f"best: trial {best['number']} (job {best['job_id']}) {best['values']}")


def sweep_status(sweep_id: SweepId, url: Url = None, key: Key = None) -> None:
    """A sweep's trials, best trial and precision report."""
    with api_client(url, key) as client:
        stdout_console().print(_show(client.get_sweep(sweep_id)))


def sweep_cancel(sweep_id: SweepId, url: Url = None, key: Key = None) -> None:
    """Cancel a sweep and its trials not yet ended."""
    with api_client(url, key) as client:
        done = client.cancel_sweep(sweep_id)
    stdout_console().print(f"sweep {done['id']} {done['state']}")


def register(app: typer.Typer) -> None:
    for command, name in ((sweep, "sweep"), (sweep_status, "sweep-status")):
        app.command(name, rich_help_panel=PANEL)(command)
    app.command("sweep-cancel", rich_help_panel=PANEL)(sweep_cancel)
