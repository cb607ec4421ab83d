"""`ampfleet artifacts|checkpoints|samples JOB`, `ampfleet download JOB` and `ampfleet
export-checkpoint JOB STEP`: what a job produced, from a shell.

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

from ampfleet.cli.common import (
    JobId,
    Key,
    Url,
    api_client,
    print_table,
    state_label,
    stdout_console,
    when,
)
from ampfleet.core.states import JobState
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


def checkpoints(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """A job's stored checkpoints, each with the metrics reported at its step."""
    with api_client(url, key) as client:
        listed = client.checkpoints(job_id)
    rows = [
        (
            str(c.step),
            ", ".join(f"{name} {value:.4g}" for name, value in sorted(c.metrics.items())) or "-",
            f"{c.size:,}",
            str(c.attempt),
            when(c.created_at, short=True),
        )
        for c in listed
    ]
    headers = ("STEP", "METRICS AT THE STEP", "BYTES", "ATTEMPT", "CREATED")
    print_table(headers, rows, "no checkpoint stored yet")


def samples(
    job_id: JobId,
    limit: Annotated[int, typer.Option(min=1, max=100, help="The latest this many.")] = 3,
    url: Url = None,
    key: Key = None,
) -> None:
    """What the model generated at the job's latest evaluations (a causal LM's fine-tune)."""
    with api_client(url, key) as client:
        listed = client.samples(job_id, limit)
    console = stdout_console()
    if not listed:
        console.print("no samples yet: a fine-tune of a causal LM makes them at each evaluation")
    for sample in listed:
        console.rule(f"step {sample.step}")
        console.print(escape(sample.text), highlight=False)
        if sample.truncated:
            console.print(f"(cut short: ampfleet download {job_id} --name samples/...)")


def export_checkpoint(
    job_id: JobId,
    step: Annotated[int, typer.Argument(min=0, help="The step of a stored checkpoint.")],
    dtype: Annotated[
        str | None, typer.Option(help="fp32 or bf16; the job's export.dtype otherwise.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait for the export; exit 0 if it SUCCEEDED.")
    ] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Export a stored checkpoint as a model: a job of 0 steps from it (a fine-tune's model
    then downloads as `ampfleet download EXPORT_JOB --name hf/merged/`)."""
    console = stdout_console()
    with api_client(url, key) as client:
        job = client.export_checkpoint(job_id, step, dtype)
        console.print(f"exporting in [bold]{job.id}[/bold] ({state_label(job.state)})")
        if not wait:
            return
        job = client.wait(job.id)
    console.print(f"{job.id} {state_label(job.state)}")
    if job.state is not JobState.SUCCEEDED:
        if job.failure_reason:
            console.print(f"[red]{escape(job.failure_reason)}[/red]")
        raise typer.Exit(1)
    console.print(f"ampfleet download {job.id} --name hf/merged/")


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
    app.command("checkpoints", rich_help_panel=PANEL)(checkpoints)
    app.command("samples", rich_help_panel=PANEL)(samples)
    app.command("download", rich_help_panel=PANEL)(download)
    app.command("export-checkpoint", rich_help_panel=PANEL)(export_checkpoint)
