"""`ampfleet sweep sweep.yaml [--follow]`, `ampfleet sweeps` and `ampfleet
sweep-status|sweep-cancel`: sweeps from a shell, through the SDK. --follow redraws a table of
the trials on every poll (Rich's Live), prints each sweep event (a trial started, pruned,
ended) above it as it comes, then the best trial and the precision report."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ampfleet.cli.common import (
    PANEL,
    Key,
    Url,
    api_client,
    fail,
    print_table,
    stdout_console,
    when,
)
from ampfleet.sdk import Client

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
    """Per precision tried, the trial with the best configuration (marked =) or else that
    precision's best or furthest, and how it went."""
    metric = sweep["spec"]["objectives"][0]["metric"]
    table = Table("precision", "trials", "trial", "state", metric, "samples/s", "slot-s", "reason")
    table.title = "precision report (= the best configuration)"
    for row in sweep["precision_report"]:
        reached = row.get("last_reported")
        value = _value(row["value"])
        if row["value"] is None and reached:
            value = f"{_value(reached['value'])} @{reached['step']}"
        table.add_row(
            row["precision"],
            f"{row['complete']}/{row['trials']}",
            f"{row['trial']}{' =' if row['same_configuration'] else ''}",
            row["state"],
            value,
            _value(row["samples_per_s"]),
            _value(row["slot_s"]),
            escape(row["reason"] or ""),
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
            events = _EventPrinter(client, started["id"], live)

            def redraw(sweep: dict[str, Any]) -> None:
                events.print_new()
                live.update(_show(sweep))

            done = client.wait_sweep(started["id"], on_poll=redraw)
            events.print_new()
    if done["state"] != "SUCCEEDED":
        fail(f"sweep {done['id']} ended {done['state']}: {done['reason']}")
    best = done.get("best_trial")
    if best:
        console.print(f"best: trial {best['number']} (job {best['job_id']}) {best['values']}")


class _EventPrinter:
    """Prints the sweep's events not printed yet, above the live table."""

    def __init__(self, client: Client, sweep_id: str, live: Live) -> None:
        self.client, self.sweep_id, self.live = client, sweep_id, live
        self.after = 0

    def print_new(self) -> None:
        for event in self.client.sweep_events(self.sweep_id, after=self.after):
            self.after = event["id"]
            self.live.console.print(f"{event['type']:<22} {escape(event['message'])}")


def list_sweeps(
    project: Annotated[str | None, typer.Option(help="Only this project's sweeps.")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Sweeps, newest first, as a table: state, trials by state, why it ended."""
    with api_client(url, key) as client:
        sweeps = client.sweeps(project=project)
    rows = [
        (
            s["id"],
            escape(s["name"] or ""),
            s["project"],
            s["state"],
            ", ".join(f"{n} {state}" for state, n in sorted(s["counts"].items())) or "-",
            when(datetime.fromisoformat(s["created_at"]), short=True),
            escape(s["reason"] or ""),
        )
        for s in sweeps
    ]
    print_table(
        ("ID", "NAME", "PROJECT", "STATE", "TRIALS", "CREATED", "REASON"), rows, "no sweeps"
    )


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
    for command, name in (
        (sweep, "sweep"),
        (list_sweeps, "sweeps"),
        (sweep_status, "sweep-status"),
        (sweep_cancel, "sweep-cancel"),
    ):
        app.command(name, rich_help_panel=PANEL)(command)
