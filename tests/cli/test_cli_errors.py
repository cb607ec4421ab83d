"""Every way a command can go wrong ends in a message and exit 1 (what the server or the
machine refused) or 2 (a bad argument or option), never a traceback: each command run with
bad arguments against a live API (in-process CliRunner; one real subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from ampfleet.cli import app as cli
from tests.support.factories import add_series
from tests.support.fleet import free_port
from tests.support.sdk_api import downloads_api as api

__all__ = ["api"]  # the fixture: a live API with a job's model, manifest and checkpoint

runner = CliRunner(env={"COLUMNS": "200"})
MISSING_JOB = "job_00000000000000000000000000"


def bad_invocations(job_id: str, folder: Path) -> list[tuple[list[str], int, str]]:
    """(arguments, exit code, a part of the message) for each."""
    (folder / "bad.yaml").write_text("recipe: [digits\n")
    (folder / "list.yaml").write_text("- recipe\n")
    (folder / "invalid.yaml").write_text("recipe: digits\nresources: {nodes: 0}\n")
    missing = folder / "no-such-folder"
    return [
        # Files that are not there, not readable or not a spec.
        (["submit", str(folder / "absent.yaml")], 1, "cannot read the job spec"),
        (["submit", str(folder)], 1, "cannot read the job spec"),
        (["submit", str(folder / "bad.yaml")], 1, "bad.yaml"),
        (["submit", str(folder / "list.yaml")], 1, "does not hold a mapping"),
        (["submit", str(folder / "invalid.yaml")], 1, "resources.nodes"),
        # Folders that are not there, or cannot be written.
        (["metrics", job_id, "--plot", str(missing / "loss.png")], 2, "does not exist"),
        (["metrics", job_id, "--plot", str(folder)], 2, "is a folder"),
        (["metrics", job_id, "--plot", "/proc/loss.png"], 1, "/proc/loss.png"),
        (["download", job_id, "-o", "/proc/nope"], 1, "/proc/nope"),
        # Jobs, keys and recipes that do not exist.
        (["status", MISSING_JOB], 1, "not found"),
        (["status", "../../etc/passwd"], 1, "not found"),
        (["logs", MISSING_JOB], 1, "not found"),
        (["metrics", MISSING_JOB], 1, "not found"),
        (["metrics", MISSING_JOB, "--plot", "-"], 1, "not found"),
        (["diagnose", MISSING_JOB], 1, "not found"),
        (["cancel", MISSING_JOB], 1, "not found"),
        (["delete", MISSING_JOB, "--yes"], 1, "not found"),
        (["artifacts", MISSING_JOB], 1, "not found"),
        (["download", MISSING_JOB], 1, "not found"),
        (["download", job_id, "--checkpoint", "7"], 1, "no stored checkpoint at step 7"),
        (["download", job_id, "--name", "nope.bin"], 1, "nope.bin"),
        (["metrics", job_id, "--plot", "-", "--names", "nope"], 1, "no metrics"),
        (["keys", "revoke", "key_nope"], 1, "not found"),
        (["profile", MISSING_JOB], 1, "not found"),
        (["profile", job_id], 1, "read-only"),  # the fixture's key is a read key
        (["recipes", "nope"], 1, "not installed"),
        # Options the command refuses before anything is sent.
        (["list", "--state", "BOGUS"], 2, "BOGUS"),
        (["list", "--limit", "0"], 2, "--limit"),
        (["logs", job_id, "--rank", "-1"], 2, "--rank"),
        (["logs", job_id, "--tail", "zero"], 2, "--tail"),
        (["metrics", job_id, "--max-points", "1"], 2, "--max-points"),
        (["keys", "create", "--role", "god"], 2, "--role"),
        (["download", job_id, "--checkpoint", "-3"], 2, "--checkpoint"),
        (["profile", job_id, "--steps", "21"], 2, "--steps"),
        (["profile", job_id, "--ranks", "0,x"], 2, "--ranks"),
        (["profile", job_id, "--ranks", ","], 2, "--ranks"),
        (["status"], 2, "job_id"),
        (["no-such-command"], 2, "No such command"),
    ]


def unreachable_invocations(job_id: str) -> list[tuple[list[str], int, str]]:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    return [
        (["status", job_id, "--url", closed], 1, "cannot reach"),
        (["list", "--url", closed], 1, "cannot reach"),
        (["logs", job_id, "--follow", "--url", closed], 1, "cannot reach"),
        (["metrics", job_id, "--plot", "-", "--url", closed], 1, "cannot reach"),
        (["download", job_id, "--url", closed], 1, "cannot reach"),
        (["recipes", "--url", closed], 1, "cannot reach"),
        (["status", job_id, "--url", "http://[::1"], 1, "is not an API address"),
        (["status", job_id, "--url", "not-a-url"], 1, "http://"),
        (["status", job_id, "--key", "amp_not_a_key"], 1, "not valid"),
    ]


def check(result: Result, code: int, says: str) -> str | None:
    """What is wrong with how the command ended, or None."""
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    if crashed or "Traceback" in result.output:
        return f"a traceback ({result.exception!r})"
    if result.exit_code != code:
        return f"exit {result.exit_code}, not {code}: {result.output}"
    if says.lower() not in result.output.lower():
        return f"no {says!r} in: {result.output}"
    return None


def test_every_command_ends_bad_input_with_a_message(api: dict[str, Any], tmp_path: Path) -> None:
    add_series(api["job_id"], "loss", [2.3, 1.1, 0.4])
    connection = ["--url", api["url"], "--key", api["key"]]
    failures = []
    for args, code, says in bad_invocations(api["job_id"], tmp_path):
        # A subcommand's options come after it; "no-such-command" takes none.
        full = args if args[0] == "no-such-command" or args == ["status"] else args + connection
        if problem := check(runner.invoke(cli, full), code, says):
            failures.append(f"ampfleet {' '.join(args)}: {problem}")
    for args, code, says in unreachable_invocations(api["job_id"]):
        extra = [] if "--url" in args else ["--url", api["url"]]
        if problem := check(runner.invoke(cli, args + extra), code, says):
            failures.append(f"ampfleet {' '.join(args)}: {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_installed_command_prints_no_traceback(api: dict[str, Any], tmp_path: Path) -> None:
    target = str(tmp_path / "missing" / "loss.png")
    connection = ["--url", api["url"], "--key", api["key"]]
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampfleet.cli",
            "metrics",
            api["job_id"],
            "--plot",
            target,
            *connection,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "200"},  # the message on one line of its box
    )
    assert process.returncode == 2
    assert "does not exist" in process.stderr
    assert "Traceback" not in process.stderr + process.stdout
