"""`pip install ampfleet` is the client alone: the SDK and the CLI with httpx, pydantic,
typer and rich (and what they need), none of the server's packages.

The proof is a fresh virtualenv holding only the distributions the built wheel's own
requirements name (tests/support/installs.py). In it: `from ampfleet import Client`,
`ampfleet --help`, and `ampfleet status JOB` against a live API, found through
AMPFLEET_API_PORT alone; the server commands say which extra to install; torch, Celery,
SQLAlchemy... cannot be imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi import FastAPI

from ampfleet import Client
from tests.support.installs import in_venv, installed_venv
from tests.support.live_api import serving

SERVER_MODULES = (
    "torch",
    "celery",
    "kombu",
    "redis",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "fastapi",
    "uvicorn",
    "sklearn",
    "numpy",
    "boto3",
    "cryptography",
    "psutil",
    "safetensors",
    "opentelemetry",
)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_venv(tmp_path_factory.mktemp("client-alone"), set())


def test_the_client_venv_has_no_server_package(client_venv: Path) -> None:
    probe = (
        "import importlib.util, json, ampfleet; from ampfleet import Client; "
        f"print(json.dumps([ampfleet.__file__, Client.__name__, "
        f"[m for m in {SERVER_MODULES!r} if importlib.util.find_spec(m)]]))"
    )
    result = in_venv(client_venv, "python", "-c", probe)
    assert result.returncode == 0, result.stderr
    package_file, client_name, importable = json.loads(result.stdout)
    assert Path(package_file).is_relative_to(client_venv)  # the wheel, not this checkout
    assert client_name == "Client"
    assert importable == []


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_cli_helps_and_shows_a_job_found_through_the_servers_port(
    client_venv: Path, app: FastAPI, make_key: Callable[..., str]
) -> None:
    shown = in_venv(client_venv, "ampfleet", "--help", env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert " submit " in shown.stdout
    assert " status " in shown.stdout
    key = make_key()
    with serving(app) as base_url:
        with Client(base_url, key) as client:
            job = client.submit({"recipe": "digits", "stop": {"max_steps": 20}})
        port = base_url.rsplit(":", 1)[1]
        env = {"AMPFLEET_API_PORT": port, "AMPFLEET_API_KEY": key}
        status = in_venv(client_venv, "ampfleet", "status", job.id, "--json", env=env)
    assert status.returncode == 0, status.stderr
    shown_job = json.loads(status.stdout)
    assert (shown_job["id"], shown_job["state"]) == (job.id, "QUEUED")


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("api", "api"),
        ("scheduler", "scheduler"),
        ("worker", "worker"),
        ("up", "all"),
        ("migrate", "db"),
        ("bootstrap-key", "db"),
    ],
)
def test_a_server_command_names_the_extra_to_install(
    client_venv: Path, command: str, extra: str
) -> None:
    result = in_venv(client_venv, "ampfleet", command)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert f"pip install 'ampfleet[{extra}]'" in line
