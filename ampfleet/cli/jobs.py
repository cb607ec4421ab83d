"""`ampfleet submit|status|list|logs|cancel|delete`: a job's life from a shell, through the
SDK (the options and formats every client command shares: common.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    MofNCompleteColumn,
    Progress,
    TextColumn,
)
from rich.table import Table
from typer.core import TyperCommand

from ampfleet.cli.common import (
    PANEL,
    Data,
    JobId,
    Key,
    StepsBar,
    Url,
    api_client,
    best_of,
    describe_event,
    eta_label,
    fail,
    number,
    print_table,
    state_label,
    stdout_console,
    steps_label,
    when,
)
from ampfleet.core.states import JobState
from ampfleet.sdk import (
    Client,
    EventFrame,
    Job,
    ProgressFrame,
    StateFrame,
)

if TYPE_CHECKING:
    from typer._click import Context  # typer vendors click: the type its commands take


def _follow(client: Client, job: Job, console: Console) -> Job:
    """A progress bar (step/total, loss, the server's ETA) and the transitions, until the
    job ends."""
    columns = (
        TextColumn("{task.description:<10}"),
        StepsBar(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("ETA {task.fields[eta]}"),
    )
    with Progress(*columns, console=console) as progress:
        total = job.progress.total_steps or None  # 0 steps is no total: "0/?", not "0/0"
        task = progress.add_task(job.state.value, total=total, loss="-", eta="-")
        for frame in client.stream_events(job.id):
            if isinstance(frame, StateFrame | EventFrame):
                progress.console.print(describe_event(frame.event))
            elif isinstance(frame, ProgressFrame):
                progress.update(
                    task,
                    description=frame.state.value,
                    completed=frame.step,
                    total=frame.total_steps or None,
                    loss=number(frame.latest_metrics.get("loss"), ".4g"),
                    eta=eta_label(frame.eta_seconds, frame.eta_confidence),
                )
    return client.get(job.id)


def _final_metrics(client: Client, job_id: str, console: Console) -> None:
    """The objectives (the series with a goal: loss, val_accuracy, ...) as the job left
    them, each with its best."""
    objectives = [s for s in client.metrics(job_id, max_points=2).series if s.summary.goal]
    if not objectives:
        return
    table = Table.grid(padding=(0, 2))
    for one in objectives:
        table.add_row(f"  {one.name}", number(one.summary.last, ".4g"), f"best {best_of(one)}")
    console.print("final metrics")
    console.print(table)


COMMAND_AFTER_DASHES = "ampfleet.command"
"""Where `submit` finds the program and arguments given after `--` (ctx.meta)."""


class _CommandAfterDashes(TyperCommand):
    """`ampfleet submit [SPEC] [OPTIONS] -- PROGRAM ARGS...`: what follows `--` is the command
    a script job runs as it is, set aside before the rest is parsed (its options are the
    program's own, never `submit`'s)."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta[COMMAND_AFTER_DASHES] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)


def submit(
    ctx: typer.Context,
    spec: Annotated[
        Path | None,
        typer.Argument(
            help="The job spec: a YAML (or JSON) file; optional with a command after --."
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Show progress until the job ends.")
    ] = False,
    idempotency_key: Annotated[
        str | None, typer.Option(help="The same key and spec give the same job.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print the job id only.")] = False,
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            help="Pack and upload this folder (honouring .gitignore and .ampignore) as the "
            "spec's code bundle.",
        ),
    ] = None,
    data: Data = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Say what packing --code left out.")
    ] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Submit a job; with --follow, exit 0 only if it SUCCEEDED. After `--`, a command to run
    as it is on every rank (script mode): `ampfleet submit --code . -- python train.py`."""
    console = stdout_console()
    command: list[str] | None = ctx.meta.get(COMMAND_AFTER_DASHES)
    if command == []:
        fail("give the program to run after --, e.g. -- python train.py")
    if spec is None and command is None:
        fail("give a job spec (a YAML file), or a command to run after --")
    with api_client(url, key) as client:
        if code is not None or data:
            from ampfleet.cli.code import bring, parse_data

            job = bring(
                client,
                spec,
                idempotency_key,
                code,
                parse_data(data),
                verbose=verbose,
                quiet=quiet,
                command=command,
            )
        else:
            job = client.submit(spec, idempotency_key, command=command)
        if quiet:
            typer.echo(job.id)
        else:
            console.print(f"submitted [bold]{job.id}[/bold] ({state_label(job.state)})")
        if not follow:
            return
        try:
            job = _follow(client, job, console)
        except KeyboardInterrupt:
            console.print(f"stopped following; the job goes on: ampfleet status {job.id}")
            raise typer.Exit(130) from None
        console.print(f"{job.id} {state_label(job.state)}")
        if job.failure_reason:
            console.print(f"[red]{escape(job.failure_reason)}[/red]")
        _final_metrics(client, job.id, console)
    if job.state is not JobState.SUCCEEDED:
        raise typer.Exit(1)


def status(
    job_id: JobId,
    as_json: Annotated[bool, typer.Option("--json", help="The job as JSON.")] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """State, progress and ETA, queue position, latest metrics and precision of a job."""
    with api_client(url, key) as client:
        job = client.get(job_id)
    if as_json:
        typer.echo(job.model_dump_json(indent=2))
        return
    progress = job.progress
    seconds = progress.eta_seconds
    eta = f", ETA {eta_label(seconds, progress.eta_confidence)}" if seconds is not None else ""
    percent = f" ({progress.fraction:.0%})" if progress.fraction is not None else ""
    rows = [
        ("job", f"[bold]{job.id}[/bold] {escape(job.name or '')}"),
        ("project", f"{job.project}, recipe {job.recipe}"),
        ("state", f"{state_label(job.state)} (attempt {job.attempt}, priority {job.priority})"),
        ("progress", f"{steps_label(job)}{percent}{eta}"),
    ]
    if job.queue is not None:
        queue = job.queue
        reason = f": {escape(queue.pending_reason)}" if queue.pending_reason else ""
        rows.append(("queue", f"position {queue.position or '-'}{reason}"))
    if job.latest_metrics:
        metrics = sorted(job.latest_metrics.items())
        rows.append(("metrics", "  ".join(f"{name}={value:.4g}" for name, value in metrics)))
    for name, setting in (("precision", job.precision), ("allreduce", job.allreduce_dtype)):
        rows.append((name, f"{setting.effective or '-'} (requested {setting.requested})"))
    if job.failure_reason:
        rows.append(("failure", f"[red]{escape(job.failure_reason)}[/red]"))
    rows += [("created", when(job.created_at)), ("started", when(job.started_at))]
    rows.append(("finished", when(job.finished_at)))
    table = Table.grid(padding=(0, 2))
    for row in rows:
        table.add_row(*row)
    stdout_console().print(table)


def list_jobs(
    state: Annotated[
        list[JobState] | None, typer.Option("--state", "-s", help="Repeat to match any.")
    ] = None,
    active: Annotated[
        bool,
        typer.Option(
            "--active",
            "-a",
            help="Jobs that have not ended: every state but SUCCEEDED, FAILED, CANCELLED and "
            "TIMED_OUT (with --state, either).",
        ),
    ] = False,
    project: Annotated[str | None, typer.Option(help="Only this project's jobs.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 20,
    url: Url = None,
    key: Key = None,
) -> None:
    """Jobs, newest first, as a table."""
    states = list(state or [])
    if active:
        states += [s for s in JobState if not s.is_terminal() and s not in states]
    with api_client(url, key) as client:
        jobs = list(client.list(state=states or None, project=project, limit=limit))
    rows = [
        (
            job.id,
            escape(job.name or ""),
            job.project,
            state_label(job.state),
            steps_label(job),
            number(job.latest_metrics.get("loss"), ".4g"),
            when(job.created_at, short=True),
        )
        for job in jobs
    ]
    print_table(("ID", "NAME", "PROJECT", "STATE", "STEP", "LOSS", "CREATED"), rows, "no jobs")


def logs(
    job_id: JobId,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Go on with new lines until the job ends.")
    ] = False,
    rank: Annotated[int | None, typer.Option(min=0, help="Only this rank's lines.")] = None,
    tail: Annotated[int | None, typer.Option(min=1, help="Start at the last N lines.")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Log lines of every rank (stdout and stderr), each after its rank: `[0] ...`."""
    with api_client(url, key) as client:
        try:
            for line in client.logs(job_id, rank=rank, tail=tail, follow=follow):
                typer.echo(f"[{line.rank}] {line.line}")
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def cancel(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Cancel a job: queued, it ends at once; placed, every rank is stopped."""
    with api_client(url, key) as client:
        job = client.cancel(job_id)
    stdout_console().print(f"{job.id} {state_label(job.state)}")


def delete(
    job_id: JobId,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Delete a job that ended, with its events, metrics, logs and artifacts."""
    if not yes:
        typer.confirm(f"delete {job_id} and everything it produced?", abort=True)
    with api_client(url, key) as client:
        client.delete(job_id)
    stdout_console().print(f"deleted {job_id}")


def register(app: typer.Typer) -> None:
    """Adds these commands to the `ampfleet` app."""
    app.command("submit", rich_help_panel=PANEL, cls=_CommandAfterDashes)(submit)
    for command, name in (
        (status, "status"),
        (list_jobs, "list"),
        (logs, "logs"),
        (cancel, "cancel"),
        (delete, "delete"),
    ):
        app.command(name, rich_help_panel=PANEL)(command)
