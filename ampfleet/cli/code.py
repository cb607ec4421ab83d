"""Bringing your own code and data from a shell: `ampfleet init NAME` writes a recipe project
that runs as it is (`--script`: a training script's project), `ampfleet run-local` runs a
spec's recipe or script on this machine with the platform's own rank entry, `ampfleet
bundles` and `ampfleet datasets` list (and upload) what a project holds; `submit --code DIR
--data NAME=PATH` (jobs.py) uses `bring` here."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)

from ampfleet.cli.common import Data, Key, Url, api_client, fail, print_table, stdout_console, when
from ampfleet.sdk import Client
from ampfleet.sdk.errors import SpecError
from ampfleet.sdk.flows import check_before_upload, spec_mapping
from ampfleet.sdk.models import Job
from ampfleet.sdk.packing import pack_folder

PANEL = "Bring your own code and data"


def parse_data(values: list[str] | None) -> dict[str, str]:
    """`--data NAME=PATH` options as {name: path or reference}."""
    inputs = {}
    for value in values or []:
        name, sep, source = value.partition("=")
        if not sep or not name or not source:
            fail(f"--data {value!r}: give NAME=PATH (a file or folder) or NAME=dataset@version")
        inputs[name] = source
    return inputs


@contextmanager
def upload_progress(quiet: bool) -> Iterator[Progress | None]:
    if quiet:
        yield None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
    )
    with Progress(*columns, console=stdout_console(), transient=True) as progress:
        yield progress


def bring(
    client: Client,
    spec: Path | None,
    idempotency_key: str | None,
    code: Path | None,
    data: dict[str, str],
    *,
    verbose: bool,
    quiet: bool,
    command: list[str] | None = None,
) -> Job:
    """Submit `spec` with the code folder and datasets it brings, uploaded with a bar each."""
    if code is not None and code.is_dir() and verbose:
        with tempfile.TemporaryDirectory() as scratch:
            packed = pack_folder(code, Path(scratch) / "bundle.tar.gz")
        console = stdout_console()
        console.print(f"packing {escape(str(code))}: {len(packed.files)} files")
        for left_out in packed.left_out:
            console.print(f"  left out {escape(left_out)}")
    with upload_progress(quiet) as progress:
        tasks: dict[str, TaskID] = {}

        def on_progress(what: str, sent: int) -> None:
            if progress is None:
                return
            if what not in tasks:
                path = Path(what)
                total = path.stat().st_size if path.is_file() else None
                tasks[what] = progress.add_task(f"uploading {escape(path.name)}", total=total)
            progress.update(tasks[what], completed=sent)

        return client.submit(
            spec,
            idempotency_key,
            code=code,
            inputs=data or None,
            on_progress=on_progress,
            command=command,
        )


def init(
    name: Annotated[str, typer.Argument(help="The project's name (and its folder's).")],
    into: Annotated[
        Path | None, typer.Option("--dir", help="Where to write it; default ./NAME.")
    ] = None,
    script: Annotated[
        bool,
        typer.Option(
            "--script",
            help="A script-mode project instead: a plain DDP train.py that torchrun runs "
            "as it is, and the same with ampfleet.train.",
        ),
    ] = False,
) -> None:
    """Write a project that runs as it is: a recipe, a job spec, example data (or, with
    --script, a training script of your own and the specs that run it)."""
    from ampfleet.templates.project import package_name, write_project
    from ampfleet.templates.script_project import write_script_project

    folder = into or Path(name)
    if folder.exists():
        fail(f"{folder} exists already; choose another name or --dir")
    try:
        written = (write_script_project if script else write_project)(folder, name)
    except OSError as error:
        fail(f"cannot write {folder}: {error.strerror or error}")
    console = stdout_console()
    for path in written:
        console.print(f"wrote {escape(str(path))}")
    if script:
        console.print(
            f"\nnext: cd {escape(str(folder))}, then\n"
            "  torchrun --standalone --nproc-per-node 2 train.py --steps 50\n"
            "  ampfleet run-local job.yaml --code . --procs 2\n"
            "  ampfleet submit job.yaml --code . --follow\n"
            "and the same with ampfleet.train: train_session.py, job-session.yaml"
        )
        return
    recipe = f"{package_name(name)}/recipe.py"
    console.print(
        f"\nnext: cd {escape(str(folder))}, edit {recipe}, then\n"
        "  ampfleet run-local job.yaml --code . --data train=data/example.csv --steps 20\n"
        "  ampfleet submit job.yaml --code . --data train=data/example.csv --follow"
    )


def run_local(
    spec: Annotated[Path, typer.Argument(help="The job spec: a YAML (or JSON) file.")],
    code: Annotated[
        Path | None, typer.Option("--code", help="The recipe's folder (code.entrypoint in it).")
    ] = None,
    data: Data = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many steps (default: the spec's).")
    ] = 20,
    procs: Annotated[
        int, typer.Option(min=1, max=8, help="Local gloo ranks (the spec's own is ignored).")
    ] = 1,
    keep: Annotated[
        Path | None, typer.Option(help="Keep the run folder here (default: a temporary one).")
    ] = None,
) -> None:
    """Run a spec's recipe here with the platform's training loop, before uploading it."""
    from ampfleet.cli.server_extras import require_extra

    require_extra("worker")
    from ampfleet.workers import local_run

    inputs = parse_data(data)
    missing = [f"{n}={p}" for n, p in inputs.items() if not Path(p).exists()]
    if missing:
        fail(f"--data {', '.join(missing)}: run-local reads local files and folders only")
    if code is not None and not code.is_dir():
        fail(f"--code {code}: not a folder")
    try:
        raw = spec_mapping(spec)
        if raw.get("code") and code is None:
            fail("the spec runs bundled code: give its folder with --code")
        job_spec = check_before_upload(raw, code is not None)
    except SpecError as error:  # its message names the fields
        fail(error.message)
    console = stdout_console()
    with _run_folder(keep) as root:
        run_dir = local_run.prepare(
            job_spec,
            root,
            code_dir=code,
            inputs={n: Path(p) for n, p in inputs.items()},
            steps=steps,
        )
        try:
            outcome = local_run.run(run_dir, procs, lambda line: console.print(escape(line)))
        except KeyboardInterrupt:
            console.print("stopped")
            raise typer.Exit(130) from None
        for failure in outcome.failures[:1]:
            console.print(f"[red]failed:[/red] {escape(str(failure.get('message', failure)))}")
        scores = {k: v for k, v in outcome.metrics.items() if k == "loss" or k.startswith("val_")}
        if scores:
            values = ", ".join(f"{k} {v:.4g}" for k, v in sorted(scores.items()))
            console.print(f"step {outcome.steps}: {escape(values)}")
        for path in [*outcome.outputs(), *outcome.exported()]:
            console.print(f"  wrote {escape(str(path.relative_to(run_dir.path)))}")
        if keep is not None:
            console.print(f"run folder: {escape(str(run_dir.path))}")
    if not outcome.succeeded:
        raise typer.Exit(1)


@contextmanager
def _run_folder(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="ampfleet-local-") as scratch:
        yield Path(scratch)


def bundles(
    upload: Annotated[
        Path | None, typer.Option(help="Upload this folder or archive as a bundle first.")
    ] = None,
    project: Annotated[str | None, typer.Option(help="Default: the key's project.")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """The project's code bundles (with --upload, upload one first)."""
    with api_client(url, key) as client:
        if upload is not None:
            bundle = client.upload_bundle(upload, project)
            stdout_console().print(f"bundle [bold]{bundle.id}[/bold] ({bundle.file_count} files)")
        listed = client.bundles(project)
    rows = [
        (b.id, b.format, f"{b.file_count}", f"{b.size:,}", b.sha256[:12], when(b.created_at))
        for b in listed
    ]
    print_table(
        ["id", "format", "files", "bytes", "sha256", "created"],
        rows,
        "no bundles (upload one with --upload DIR, or submit --code DIR)",
    )


def datasets(
    upload: Annotated[
        str | None,
        typer.Option(help="NAME=PATH: upload a file or folder as the next version of NAME."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Only this dataset's versions.")] = None,
    project: Annotated[str | None, typer.Option(help="Default: the key's project.")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """The project's datasets, newest version first (with --upload, upload one first)."""
    with api_client(url, key) as client:
        for dataset_name, source in parse_data([upload] if upload else []).items():
            dataset = client.upload_dataset(dataset_name, source, project)
            stdout_console().print(f"dataset [bold]{dataset.ref}[/bold] ({dataset.id})")
        listed = client.datasets(name, project)
    rows = [
        (
            f"{d.name}@{d.version}",
            d.id,
            d.format,
            f"{d.file_count}",
            f"{d.size:,}",
            when(d.created_at),
        )
        for d in listed
    ]
    print_table(
        ["dataset", "id", "format", "files", "bytes", "created"],
        rows,
        "no datasets (upload one with --upload NAME=PATH, or submit --data NAME=PATH)",
    )


def register(app: typer.Typer) -> None:
    for command, name in (
        (init, "init"),
        (run_local, "run-local"),
        (bundles, "bundles"),
        (datasets, "datasets"),
    ):
        app.command(name, rich_help_panel=PANEL)(command)
