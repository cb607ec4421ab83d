"""The server processes start through `ampfleet` too: their commands must not load the SDK
(the client commands' dependency), while every command keeps its place and its help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SERVER_COMMANDS = ["api", "scheduler", "worker", "up", "migrate", "bootstrap-key"]
CLIENT_COMMANDS = [
    "submit",
    "status",
    "list",
    "logs",
    "cancel",
    "delete",
    "metrics",
    "keys",
    "artifacts",
    "download",
    "recipes",
]

# In a fresh interpreter: the help of one command, then its arguments parsed as a run would
# (without running it), then which of the SDK's modules were imported on the way.
PROBE = """
import json, sys
from typer.main import get_command
from typer.testing import CliRunner
from ampfleet.cli import app

name, args = sys.argv[1], sys.argv[2:]
runner = CliRunner(env={"COLUMNS": "200"})
shown = runner.invoke(app, [name, "--help"], prog_name="ampfleet")
group = get_command(app)
with group.make_context("ampfleet", [name, *args]) as ctx:
    _, command, rest = group.resolve_command(ctx, [name, *args])
    params = command.make_context(name, rest, parent=ctx).params
print(json.dumps({
    "help": [shown.exit_code, shown.output],
    "params": {key: str(value) for key, value in params.items()},
    "sdk": sorted(m for m in sys.modules if m.startswith(("ampfleet.sdk", "ampfleet.cli.common"))),
}))
"""


def probe(name: str, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, name, *args], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", SERVER_COMMANDS)
def test_a_server_command_parses_and_helps_without_importing_the_sdk(name: str) -> None:
    seen = probe(name)
    exit_code, output = seen["help"]
    assert exit_code == 0
    assert f"Usage: ampfleet {name}" in output
    assert seen["sdk"] == []


def test_server_command_options_are_parsed_as_before() -> None:
    api = probe("api", "--host", "0.0.0.0", "--port", "9001")
    assert api["params"] == {"host": "0.0.0.0", "port": "9001"}
    key = probe("bootstrap-key", "--role", "read", "--project", "team")
    assert key["params"] == {"project": "team", "role": "read", "name": "bootstrap"}
    assert api["sdk"] == key["sdk"] == []


def test_a_client_command_loads_the_sdk_when_it_is_asked_for() -> None:
    seen = probe("status", "job_x")
    assert "Usage: ampfleet status" in seen["help"][1]
    assert seen["params"]["job_id"] == "job_x"
    assert "ampfleet.sdk" in seen["sdk"]


def test_the_command_list_shows_every_command_and_suggests_mistyped_ones() -> None:
    from typer.testing import CliRunner

    from ampfleet.cli import app

    runner = CliRunner(env={"COLUMNS": "200"})
    listing = runner.invoke(app, ["--help"]).output
    for name in SERVER_COMMANDS + CLIENT_COMMANDS:
        assert f" {name} " in listing
    assert "Use the API" in listing  # the client commands' panel
    assert "Did you mean 'submit'?" in runner.invoke(app, ["submt"]).output
    assert "Did you mean 'scheduler'?" in runner.invoke(app, ["schedulr"]).output
    assert runner.invoke(app, ["keys", "create", "--help"]).exit_code == 0
