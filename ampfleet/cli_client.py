"""`ampfleet submit|status|list|logs|cancel|delete|keys`: the API from a shell, through the
SDK (`metrics` and `diagnose` live in cli_metrics.py, `artifacts` and `download` in
cli_artifacts.py). Every command takes `--url` and `--key` (defaults: AMPFLEET_URL, else the
address the server's AMPFLEET_API_HOST and AMPFLEET_API_PORT give; AMPFLEET_API_KEY, then
the admin key file in AMPFLEET_DATA_DIR, `var/admin.key` by default). An error answer
prints its message and offending fields, and exits 1."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
)
from rich.progress_bar import ProgressBar
from rich.table import Table
from typer.core import TyperCommand

from ampfleet.core.roles import Role
from ampfleet.core.states import JobState
from ampfleet.sdk import (
    ApiError,
    Client,
    ClientError,
    Event,
    EventFrame,
    Job,
    MetricSeries,
    ProgressFrame,
    StateFrame,
    Unauthorized,
)

if TYPE_CHECKING:
    from typer._click import Context  # typer vendors click: the type its commands take

Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="API address [default: $AMPFLEET_URL, else http://$AMPFLEET_API_HOST:"
        "$AMPFLEET_API_PORT as the server reads them, 127.0.0.1:8000 if unset]",
    ),
]
Key = Annotated[
    str | None,
    typer.Option(
        "--key", help="API key [default: $AMPFLEET_API_KEY, else $AMPFLEET_DATA_DIR/admin.key]"
    ),
]
JobId = Annotated[str, typer.Argument(help="The job's id (job_...).", show_default=False)]
Data = Annotated[
    list[str] | None,
    typer.Option(
        "--data",
        help="NAME=PATH: upload a file or folder as dataset NAME, the job's input NAME "
        "(or NAME=dataset@3 for one uploaded before). Repeat for more.",
    ),
]
PANEL = "Use the API"
STATE_STYLES = {"SUCCEEDED": "green", "RUNNING": "cyan", "QUEUED": "yellow"}
keys_app = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)


def _stdout() -> Console:
    return Console(highlight=False)


def _report(error: ClientError, key_given: bool) -> None:
    console = Console(stderr=True, highlight=False)
    message = error.message if isinstance(error, ApiError) else str(error)
    console.print(f"[red]error:[/red] {escape(message)}")
    for detail in error.details if isinstance(error, ApiError) else []:
        if f"{detail.field}: {detail.message}" not in message:  # not already in its summary
            console.print(f"  [red]{escape(detail.field or '-')}[/red]: {escape(detail.message)}")
    if isinstance(error, Unauthorized) and not key_given:
        console.print("  give a key with --key or AMPFLEET_API_KEY")


def _fail(message: str) -> NoReturn:
    Console(stderr=True, highlight=False).print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(1)


@contextmanager
def _client(url: str | None, key: str | None) -> Iterator[Client]:
    """A client whose failures end the command with their message, never a traceback: an
    error answer or an unreachable server, an address that is no URL, a file that cannot
    be read or written."""
    client: Client | None = None
    try:
        client = Client(url, key)
        yield client
    except ClientError as error:
        _report(error, key_given=client is not None and client.api_key is not None)
        raise typer.Exit(1) from None
    except httpx.InvalidURL as error:
        _fail(f"{url} is not an API address: {error}")
    except BrokenPipeError:
        # The reader went away (`ampfleet logs JOB | head`): nothing left to tell it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(1) from None
    except OSError as error:
        _fail(f"{error.filename}: {error.strerror}" if error.filename else str(error))
    finally:
        if client is not None:
            client.close()


def _state(state: JobState) -> str:
    style = STATE_STYLES.get(state.value, "red" if state.is_terminal() else "white")
    return f"[{style}]{state.value}[/{style}]"


def _when(moment: datetime | None, short: bool = False) -> str:
    """Local time; `short` leaves the year out, for tables."""
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def _steps(job: Job) -> str:
    total = job.progress.total_steps
    return f"{job.progress.step}/{total}" if total else str(job.progress.step)


def _describe(event: Event) -> str:
    what = f"{escape(event.reason)}: {escape(event.message)}"
    if event.to_state is None:
        return f"  [dim]{what}[/dim]"
    moved = f"{event.from_state} -> " if event.from_state else ""
    return f"{moved}{_state(event.to_state)}  [dim]{what}[/dim]"


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> None:
    """A table whose first column (an id) never wraps; `empty` when there are no rows."""
    table = Table(*headers)
    table.columns[0].no_wrap = True
    for row in rows:
        table.add_row(*row)
    _stdout().print(table if rows else empty)


def _duration(seconds: float) -> str:
    """75 -> '1m 15s'; 7300 -> '2h 01m'."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def _eta(seconds: float | None, confidence: str | None) -> str:
    """The server's ETA and how far to trust it (api/jobs/eta.py): '4m 10s (medium)'."""
    if seconds is None:
        return "-"
    return _duration(seconds) + (f" ({confidence})" if confidence else "")


class StepsBar(BarColumn):
    """rich draws a full bar for a total it does not know (none, or 0 steps), which on a job
    that has ended reads as all done: a job failed at step 0 looked finished. Ended without
    a known total, the bar is full only if the job succeeded; while it runs, rich's pulse
    says it has no total yet. The task's description is the job's state."""

    def render(self, task: Task) -> ProgressBar:
        if task.total or not JobState(task.description).is_terminal():
            return super().render(task)
        return ProgressBar(
            total=1,
            completed=float(task.description == JobState.SUCCEEDED),
            width=None if self.bar_width is None else max(1, self.bar_width),
            style=self.style,
            complete_style=self.complete_style,
            finished_style=self.finished_style,
        )


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
                progress.console.print(_describe(frame.event))
            elif isinstance(frame, ProgressFrame):
                progress.update(
                    task,
                    description=frame.state.value,
                    completed=frame.step,
                    total=frame.total_steps or None,
                    loss=_number(frame.latest_metrics.get("loss"), ".4g"),
                    eta=_eta(frame.eta_seconds, frame.eta_confidence),
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
        table.add_row(f"  {one.name}", _number(one.summary.last, ".4g"), f"best {_best(one)}")
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
    console = _stdout()
    command: list[str] | None = ctx.meta.get(COMMAND_AFTER_DASHES)
    if command == []:
        _fail("give the program to run after --, e.g. -- python train.py")
    if spec is None and command is None:
        _fail("give a job spec (a YAML file), or a command to run after --")
    with _client(url, key) as client:
        if code is not None or data:
            from ampfleet.cli_code import bring, parse_data

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
            console.print(f"submitted [bold]{job.id}[/bold] ({_state(job.state)})")
        if not follow:
            return
        try:
            job = _follow(client, job, console)
        except KeyboardInterrupt:
            console.print(f"stopped following; the job goes on: ampfleet status {job.id}")
            raise typer.Exit(130) from None
        console.print(f"{job.id} {_state(job.state)}")
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
    with _client(url, key) as client:
        job = client.get(job_id)
    if as_json:
        typer.echo(job.model_dump_json(indent=2))
        return
    progress = job.progress
    seconds = progress.eta_seconds
    eta = f", ETA {_eta(seconds, progress.eta_confidence)}" if seconds is not None else ""
    percent = f" ({progress.fraction:.0%})" if progress.fraction is not None else ""
    rows = [
        ("job", f"[bold]{job.id}[/bold] {escape(job.name or '')}"),
        ("project", f"{job.project}, recipe {job.recipe}"),
        ("state", f"{_state(job.state)} (attempt {job.attempt}, priority {job.priority})"),
        ("progress", f"{_steps(job)}{percent}{eta}"),
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
    rows += [("created", _when(job.created_at)), ("started", _when(job.started_at))]
    rows.append(("finished", _when(job.finished_at)))
    table = Table.grid(padding=(0, 2))
    for row in rows:
        table.add_row(*row)
    _stdout().print(table)


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
    with _client(url, key) as client:
        jobs = list(client.list(state=states or None, project=project, limit=limit))
    rows = [
        (
            job.id,
            escape(job.name or ""),
            job.project,
            _state(job.state),
            _steps(job),
            _number(job.latest_metrics.get("loss"), ".4g"),
            _when(job.created_at, short=True),
        )
        for job in jobs
    ]
    _print_table(("ID", "NAME", "PROJECT", "STATE", "STEP", "LOSS", "CREATED"), rows, "no jobs")


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
    with _client(url, key) as client:
        try:
            for line in client.logs(job_id, rank=rank, tail=tail, follow=follow):
                typer.echo(f"[{line.rank}] {line.line}")
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def cancel(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Cancel a job: queued, it ends at once; placed, every rank is stopped."""
    with _client(url, key) as client:
        job = client.cancel(job_id)
    _stdout().print(f"{job.id} {_state(job.state)}")


def delete(
    job_id: JobId,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Delete a job that ended, with its events, metrics, logs and artifacts."""
    if not yes:
        typer.confirm(f"delete {job_id} and everything it produced?", abort=True)
    with _client(url, key) as client:
        client.delete(job_id)
    _stdout().print(f"deleted {job_id}")


def _best(series: MetricSeries) -> str:
    """Only an objective has a best (core/metric_goals.py); the other series show '-'."""
    summary = series.summary
    if summary.best is None or summary.goal is None:
        return "-"
    return f"{summary.best:.4g} ({summary.goal}) at step {summary.best_step}"


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
    with _client(url, key) as client:
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
    with _client(url, key) as client:
        keys = client.keys.list(project=project)
    rows = [
        (
            row.id,
            row.project,
            row.role,
            escape(row.name),
            _when(row.created_at, short=True),
            _when(row.last_used_at, short=True),
            _when(row.revoked_at, short=True),
        )
        for row in keys
    ]
    headers = ("ID", "PROJECT", "ROLE", "NAME", "CREATED", "LAST USED", "REVOKED")
    _print_table(headers, rows, "no keys")


@keys_app.command("revoke")
def revoke_key(
    key_id: Annotated[str, typer.Argument(help="The key's id (not the key itself).")],
    url: Url = None,
    key: Key = None,
) -> None:
    """Revoke a key; it stops working at once."""
    with _client(url, key) as client:
        client.keys.revoke(key_id)
    _stdout().print(f"revoked {key_id}")


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
    from ampfleet import cli_metrics  # here, as the others below: they build on this module

    cli_metrics.register(app)
    app.add_typer(keys_app, name="keys", rich_help_panel=PANEL)
    from ampfleet import cli_artifacts

    cli_artifacts.register(app)
    from ampfleet import cli_profile

    cli_profile.register(app)
    from ampfleet import cli_recipes

    cli_recipes.register(app)
    from ampfleet import cli_code

    cli_code.register(app)
