"""`ampfleet ui`: the web console, opened logged in. The key stays here: the API gives a
one-time login token that lasts a minute, the browser opens `<api>/ui/#login=<token>`, and
the console trades the token for a session of its own (as Jupyter's token URLs do). With
--no-browser, or where no browser can be started (a server, a container), the URL is only
printed, for a browser elsewhere or a headless one."""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer
from rich.console import Console

from ampfleet.cli.common import PANEL, Key, Url, api_client


def ui(
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Only print the URL; open no browser.")
    ] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Open the web console, logged in with a one-time link (the key is not in it)."""
    with api_client(url, key) as client:
        login = client.console_login()
    note = Console(stderr=True, highlight=False)
    typer.echo(login.url)
    note.print(f"the link opens the console once, within {login.expires_in_s:g} s")
    if not no_browser and not webbrowser.open(login.url):
        note.print("no browser could be started here: open the link in one")


def register(app: typer.Typer) -> None:
    app.command("ui", rich_help_panel=PANEL)(ui)
