"""`ampfleet api|scheduler|worker|up|migrate|bootstrap-key|doctor`: run the processes and
manage the database; the API's user commands (submit, status, ...) come from
client_commands.py, loaded only when one of them runs (or the command list is shown): they
need the SDK, the server processes do not."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
import typer.main
from typer.core import TyperGroup

from ampfleet.cli.server_extras import require_extra
from ampfleet.core.logs import configure_logging
from ampfleet.core.private_files import make_process_private, write_private_text
from ampfleet.core.project_names import project_name_problem
from ampfleet.core.roles import Role
from ampfleet.core.settings import (
    ADMIN_KEY_FILE_NAME,
    SettingsFileError,
    get_settings,
    load_settings_file,
)

if TYPE_CHECKING:
    # typer vendors click: these are the types its groups' methods take.
    from typer._click import Command, Context

log = logging.getLogger("ampfleet.cli")


@cache
def client_commands() -> Mapping[str, Command]:
    from ampfleet.cli.client_commands import register

    client_app = typer.Typer()
    register(client_app)
    return typer.main.get_group(client_app).commands


class _Commands(TyperGroup):
    """The server commands, and the client commands (client_commands.py, which imports the SDK)
    added only when something else is asked for: one of them, the list of commands, a
    mistyped name to suggest one for. So `ampfleet api` never imports the SDK."""

    def list_commands(self, ctx: Context) -> list[str]:
        self.commands.update(client_commands())
        return super().list_commands(ctx)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        if not args or args[0] not in self.commands:
            self.commands.update(client_commands())
        return super().resolve_command(ctx, args)


def start_server_process(role: str, *, traced: bool = False) -> None:
    """Every server command starts here: private files, then its logging, and for the
    processes a job's trace crosses (api, scheduler, worker) its tracing, before any of
    them opens the database."""
    settings = get_settings()
    make_process_private(settings.data_dir)
    configure_logging(role, settings.log_level, settings.log_format)
    if traced:
        from ampfleet.core.tracing import configure_tracing

        configure_tracing(role)


app = typer.Typer(
    cls=_Commands, help="ampfleet: training-as-a-service backend.", no_args_is_help=True
)


@app.command()
def migrate() -> None:
    """Apply database migrations (Alembic) up to the latest revision."""
    require_extra("db")
    from ampfleet.core.migrate import upgrade

    start_server_process("migrate")
    upgrade(get_settings().effective_database_url)
    typer.echo("database is at the latest revision")


@app.command("bootstrap-key")
def bootstrap_key(
    project: Annotated[str, typer.Option(help="Project the key belongs to.")] = "default",
    role: Annotated[Role, typer.Option(help="What the key may do.")] = Role.ADMIN,
    name: Annotated[str, typer.Option(help="A label for the key.")] = "bootstrap",
) -> None:
    """Create an API key directly in the database and print it (first admin key, scripts)."""
    if (problem := project_name_problem(project)) is not None:
        raise typer.BadParameter(problem, param_hint="--project")
    require_extra("db")
    from ampfleet.core.db import session_scope
    from ampfleet.core.keys import create_key

    with session_scope() as session:
        _, key = create_key(
            session,
            project=project,
            role=role,
            name=name,
            pepper=get_settings().secret_key,
        )
    typer.echo(key)


def _ensure_admin_key_file() -> None:
    """First start of an all-in-one install: make an admin key and leave it in the data
    folder (readable by its owner only), so the quickstart has a key to use."""
    from ampfleet.core.db import session_scope
    from ampfleet.core.keys import create_key, has_active_admin

    settings = get_settings()
    path = settings.data_dir / ADMIN_KEY_FILE_NAME
    with session_scope() as session:
        if has_active_admin(session):
            return
        _, key = create_key(
            session,
            project="default",
            role=Role.ADMIN,
            name="bootstrap",
            pepper=settings.secret_key,
        )
    write_private_text(path, key + "\n")
    log.info("created an admin API key in %s", path)


@app.command()
def api(
    host: str | None = typer.Option(None, help="Defaults to AMPFLEET_API_HOST."),
    port: int | None = typer.Option(None, help="Defaults to AMPFLEET_API_PORT."),
) -> None:
    """Serve the HTTP API (uvicorn)."""
    require_extra("api")
    import uvicorn

    settings = get_settings()
    start_server_process("api", traced=True)
    uvicorn.run(
        "ampfleet.api.app:create_serving_app",
        factory=True,
        host=host or settings.api_host,
        port=port or settings.api_port,
        log_config=None,
        access_log=False,
        timeout_keep_alive=settings.api_keepalive_s,
    )


@app.command()
def scheduler() -> None:
    """Place queued jobs on live nodes and reap lost attempts."""
    require_extra("scheduler")
    from ampfleet.scheduler.loop import Scheduler
    from ampfleet.scheduler.webhook_dispatch import WebhookDispatcher

    start_server_process("scheduler", traced=True)
    instance = Scheduler()
    dispatcher = WebhookDispatcher(get_settings())
    dispatcher.start()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        instance.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    instance.run_forever()
    dispatcher.stop()


@app.command()
def worker() -> None:
    """Run this node: its agent and a Celery worker on the node's own queue."""
    require_extra("worker")
    from ampfleet.workers.main import run_worker

    start_server_process("worker", traced=True)
    run_worker()


@app.command("run-attempt")
def run_attempt(
    pool: Annotated[str, typer.Option(help="The pool whose node this is.")],
    job: Annotated[str, typer.Option(help="The job id.")],
    attempt: Annotated[int, typer.Option(help="The attempt number.")],
    settings_file: Annotated[
        Path | None,
        typer.Option(
            help="A file of AMPFLEET_* lines over the environment (mode 0600): this node's "
            "credentials, which the batch job does not carry."
        ),
    ] = None,
) -> None:
    """Run this node's share of one attempt inside a compute backend's allocation (a Slurm
    batch job's step); what the Slurm pool's batch jobs run, not a command for people."""
    require_extra("worker")
    from ampfleet.workers.one_attempt import run_attempt as run

    if settings_file is not None:
        try:
            load_settings_file(settings_file)
        except SettingsFileError as error:
            typer.echo(f"ampfleet run-attempt: {error}", err=True)
            raise typer.Exit(2) from None
    start_server_process("worker", traced=True)
    raise typer.Exit(run(get_settings(), pool, job, attempt))


@app.command()
def doctor() -> None:
    """Check on this node that the sandbox of bundled code holds: from inside it, try what
    a hostile tenant would (files, the control plane's ports, seccomp, /tmp, memory)."""
    require_extra("worker")
    from ampfleet.workers.doctor import check_node

    checks = check_node(get_settings())
    for check in checks:
        print(f"{'held ' if check.held else 'FAILED'}  {check.name}: {check.detail}")
    failed = [c for c in checks if not c.held]
    print(f"{len(checks) - len(failed)} held, {len(failed)} failed")
    raise typer.Exit(1 if failed else 0)


@app.command()
def up() -> None:
    """All in one: migrate, then the api, the scheduler and one local worker node."""
    require_extra("all")
    from ampfleet.core.migrate import upgrade

    start_server_process("up")
    settings = get_settings()
    upgrade(settings.effective_database_url)
    _ensure_admin_key_file()
    roles = ("api", "scheduler", "worker")
    children = {
        role: subprocess.Popen([sys.executable, "-m", "ampfleet.cli", role]) for role in roles
    }
    log.info(
        "ampfleet up: API on http://%s:%s (database %s, broker %s); Ctrl-C stops",
        settings.api_host,
        settings.api_port,
        settings.effective_database_url.split("://")[0],
        settings.effective_broker_url.split("://")[0],
    )
    stopping = False

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    exit_code = 0
    while not stopping:
        for role, child in children.items():
            if child.poll() is not None:
                log.error("%s exited with %s; stopping the others", role, child.returncode)
                exit_code = 1
                stopping = True
        time.sleep(0.2)
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for child in children.values():
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            child.kill()
    raise typer.Exit(exit_code)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":
    main()
