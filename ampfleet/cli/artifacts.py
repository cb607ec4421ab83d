"""`ampfleet artifacts JOB` and `ampfleet download JOB`: what a job produced, from a shell.

A download shows one progress bar per file (bytes, rate, ETA); run the same command again
after an interruption and it continues from the `.part` file it left."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from ampfleet.cli.common import JobId, Key, Url, api_client, print_table, stdout_console, when
from ampfleet.sdk.downloads import ProgressCallback

PANEL = "Use the API"


def artifacts(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Everything a job produced (model, manifest, checkpoints, outputs), as a table."""
    with api_client(url, key) as client:
        listed = client.artifacts(job_id)
    rows = [
        (
            escape(a.name),
            a.kind,
            f"{a.size:,}",
            "" if a.step is None else str(a.step),
            a.sha256[:12],
            when(a.created_at, short=True),
        )
        for a in listed
    ]
    print_table(("NAME", "KIND", "BYTES", "STEP", "SHA256", "CREATED"), rows, "no artifacts yet")


def download(
    job_id: JobId,
    to: Annotated[Path, typer.Option("--output", "-o", help="Folder to write into.")] = Path("."),
    name: Annotated[
        str,
        typer.Option(
            "--name", "-n", help="An artifact's name; 'model' is the model; hf/merged/ a folder."
        ),
    ] = "model",
    checkpoint: Annotated[
        int | None, typer.Option("--checkpoint", min=0, help="The checkpoint at this step.")
    ] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Download the model (model.safetensors + manifest.json), any artifact (--name) or a
    checkpoint (--checkpoint STEP); verified by sha256, resumed if run again."""
    console = stdout_console()
    with api_client(url, key) as client, progress_bars(console) as show:
        if checkpoint is not None:
            paths = [client.download_checkpoint(job_id, checkpoint, to=to, progress=show)]
        else:
            paths = client.download(job_id, name, to=to, progress=show)
    for path in paths:
        console.print(f"saved {escape(str(path))}")


@contextmanager
def progress_bars(console: Console) -> Iterator[ProgressCallback]:
    """A download's progress callback that shows a bar per file (bytes, rate, ETA)."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bars: dict[str, TaskID] = {}

        def show(file: str, done: int, total: int) -> None:
            if file not in bars:
                bars[file] = progress.add_task(escape(file), total=total, completed=0)
            progress.update(bars[file], completed=done)

        yield show


def register(app: typer.Typer) -> None:
    app.command("artifacts", rich_help_panel=PANEL)(artifacts)
    app.command("download", rich_help_panel=PANEL)(download)
