"""A server command's first check, shared by the server commands and `ampfleet init` (which
runs a job locally): the packages of its extra are installed."""

from __future__ import annotations

import typer

from ampfleet.extras import missing_packages


def require_extra(extra: str) -> None:
    """A server command's first step: the packages of its extra are installed (a client-only
    `pip install ampfleet` has none), or one line says which extra to install, and exit 1."""
    missing = missing_packages(extra)
    if missing:
        typer.echo(
            f"error: this command needs the server packages of ampfleet[{extra}] "
            f"(missing: {', '.join(missing)}); install them with: pip install 'ampfleet[{extra}]'",
            err=True,
        )
        raise typer.Exit(1)
