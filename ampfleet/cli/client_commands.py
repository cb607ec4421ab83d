"""The API's user commands, a module per group, added to the `ampfleet` app only when one of
them is asked for (servers.py): they import the SDK, the server processes do not."""

from __future__ import annotations

import typer

from ampfleet.cli import artifacts, code, console, jobs, keys, metrics, profile, recipes, sweeps
from ampfleet.cli.common import PANEL


def register(app: typer.Typer) -> None:
    jobs.register(app)
    metrics.register(app)
    app.add_typer(keys.keys_app, name="keys", rich_help_panel=PANEL)
    for group in (artifacts, profile, recipes, code, sweeps, console):
        group.register(app)
