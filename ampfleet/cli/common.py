"""What every client command shares: the `--url` and `--key` options and the client they
make (defaults: AMPFLEET_URL, else the address the server's AMPFLEET_API_HOST and
AMPFLEET_API_PORT give; AMPFLEET_API_KEY, then the admin key file in AMPFLEET_DATA_DIR,
`var/admin.key` by default), how an error answer is printed (its message and offending
fields, exit 1), and the table and value formats."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, NoReturn

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Task,
)
from rich.progress_bar import ProgressBar
from rich.table import Table

from ampfleet.core.states import JobState
from ampfleet.sdk import (
    ApiError,
    Client,
    ClientError,
    Event,
    Job,
    MetricSeries,
    Unauthorized,
)

if TYPE_CHECKING:
    pass  # typer vendors click: the type its commands take

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


def stdout_console() -> Console:
    return Console(highlight=False)


def report_error(error: ClientError, key_given: bool) -> None:
    console = Console(stderr=True, highlight=False)
    message = error.message if isinstance(error, ApiError) else str(error)
    console.print(f"[red]error:[/red] {escape(message)}")
    for detail in error.details if isinstance(error, ApiError) else []:
        if f"{detail.field}: {detail.message}" not in message:  # not already in its summary
            console.print(f"  [red]{escape(detail.field or '-')}[/red]: {escape(detail.message)}")
    if isinstance(error, Unauthorized) and not key_given:
        console.print("  give a key with --key or AMPFLEET_API_KEY")


def fail(message: str) -> NoReturn:
    Console(stderr=True, highlight=False).print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(1)


@contextmanager
def api_client(url: str | None, key: str | None) -> Iterator[Client]:
    """A client whose failures end the command with their message, never a traceback: an
    error answer or an unreachable server, an address that is no URL, a file that cannot
    be read or written."""
    client: Client | None = None
    try:
        client = Client(url, key)
        yield client
    except ClientError as error:
        report_error(error, key_given=client is not None and client.api_key is not None)
        raise typer.Exit(1) from None
    except httpx.InvalidURL as error:
        fail(f"{url} is not an API address: {error}")
    except BrokenPipeError:
        # The reader went away (`ampfleet logs JOB | head`): nothing left to tell it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(1) from None
    except OSError as error:
        fail(f"{error.filename}: {error.strerror}" if error.filename else str(error))
    finally:
        if client is not None:
            client.close()


def state_label(state: JobState) -> str:
    style = STATE_STYLES.get(state.value, "red" if state.is_terminal() else "white")
    return f"[{style}]{state.value}[/{style}]"


def when(moment: datetime | None, short: bool = False) -> str:
    """Local time; `short` leaves the year out, for tables."""
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def steps_label(job: Job) -> str:
    total = job.progress.total_steps
    return f"{job.progress.step}/{total}" if total else str(job.progress.step)


def describe_event(event: Event) -> str:
    what = f"{escape(event.reason)}: {escape(event.message)}"
    if event.to_state is None:
        return f"  [dim]{what}[/dim]"
    moved = f"{event.from_state} -> " if event.from_state else ""
    return f"{moved}{state_label(event.to_state)}  [dim]{what}[/dim]"


def number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> None:
    """A table whose first column (an id) never wraps; `empty` when there are no rows."""
    table = Table(*headers)
    table.columns[0].no_wrap = True
    for row in rows:
        table.add_row(*row)
    stdout_console().print(table if rows else empty)


def duration(seconds: float) -> str:
    """75 -> '1m 15s'; 7300 -> '2h 01m'."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def eta_label(seconds: float | None, confidence: str | None) -> str:
    """The server's ETA and how far to trust it (api/jobs/eta.py): '4m 10s (medium)'."""
    if seconds is None:
        return "-"
    return duration(seconds) + (f" ({confidence})" if confidence else "")


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


def best_of(series: MetricSeries) -> str:
    """Only an objective has a best (core/metric_goals.py); the other series show '-'."""
    summary = series.summary
    if summary.best is None or summary.goal is None:
        return "-"
    return f"{summary.best:.4g} ({summary.goal}) at step {summary.best_step}"
