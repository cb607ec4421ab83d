"""`ampfleet keys create|list|revoke`: API keys, through the SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ampfleet.cli.common import (
    Key,
    Url,
    api_client,
    print_table,
    stdout_console,
    when,
)
from ampfleet.core.roles import Role

if TYPE_CHECKING:
    pass  # typer vendors click: the type its commands take

keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)


@keys_app.command("create")
def create_key(
    role: Annotated[Role, typer.Option(help="What the key may do.")] = Role.WRITE,
    name: Annotated[str, typer.Option(help="A label for the key.")] = "",
    project: Annotated[
        str | None, typer.Option(help="[default: the project of the key in use]")
    ] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Create a key and print it: it is shown this once."""
    with api_client(url, key) as client:
        created = client.keys.create(role=role, name=name, project=project)
    Console(stderr=True).print(
        f"created {created.id} ({created.role}, project {created.project}); "
        "the key is shown this once:"
    )
    typer.echo(created.key)


@keys_app.command("list")
def list_keys(
    project: Annotated[str | None, typer.Option(help="Only this project's keys.")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Keys (never their secrets): role, project, last use, revocation."""
    with api_client(url, key) as client:
        keys = client.keys.list(project=project)
    rows = [
        (
            row.id,
            row.project,
            row.role,
            escape(row.name),
            when(row.created_at, short=True),
            when(row.last_used_at, short=True),
            when(row.revoked_at, short=True),
        )
        for row in keys
    ]
    headers = ("ID", "PROJECT", "ROLE", "NAME", "CREATED", "LAST USED", "REVOKED")
    print_table(headers, rows, "no keys")


@keys_app.command("revoke")
def revoke_key(
    key_id: Annotated[str, typer.Argument(help="The key's id (not the key itself).")],
    url: Url = None,
    key: Key = None,
) -> None:
    """Revoke a key; it stops working at once."""
    with api_client(url, key) as client:
        client.keys.revoke(key_id)
    stdout_console().print(f"revoked {key_id}")
