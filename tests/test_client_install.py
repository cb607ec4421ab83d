"""`pip install ampfleet` is the client alone: the SDK and the CLI with httpx, pydantic,
typer and rich (and what they need), none of the server's packages.

The proof is a fresh virtualenv (no system site-packages) holding only the distributions the
built wheel's own requirements name, copied from this environment so that no index is asked;
pip then installs the wheel there without an index, which fails if the wheel needs anything
that was not copied. In it: `from ampfleet import Client`, `ampfleet --help`, and
`ampfleet status JOB` against a live API, found through AMPFLEET_API_PORT alone; the server
commands say which extra to install; torch, Celery, SQLAlchemy... cannot be imported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from email.parser import Parser
from importlib.metadata import Distribution, distribution
from pathlib import Path

import pytest
from fastapi import FastAPI
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ampfleet import Client
from tests.support.live_api import serving

ROOT = Path(__file__).resolve().parent.parent
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
COMMAND_TIMEOUT_S = 120


def build_wheel(folder: Path) -> Path:
    """The wheel of the working tree, built from a copy (a build writes into its source)."""
    source = folder / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "ampfleet", source / "ampfleet", ignore=shutil.ignore_patterns("__pycache__")
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder), str(source)],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    (wheel,) = folder.glob("ampfleet-*.whl")
    return wheel


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def needed(requirements: list[Requirement], extras: set[str]) -> list[Requirement]:
    """The requirements that apply with these extras (none: the base install)."""
    return [
        r
        for r in requirements
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras or {""})
    ]


def closure(requirements: list[Requirement]) -> dict[str, Distribution]:
    """The installed distributions these requirements need, theirs included."""
    found: dict[str, Distribution] = {}
    followed: set[tuple[str, frozenset[str]]] = set()  # a name, with the extras it was asked with
    pending = list(requirements)
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in followed:
            continue
        followed.add((name, frozenset(requirement.extras)))
        installed = found.setdefault(name, distribution(requirement.name))
        theirs = [Requirement(line) for line in installed.requires or []]
        pending.extend(needed(theirs, set(requirement.extras)))
    return found


def copy_into(installed: Distribution, site_packages: Path) -> None:
    """A distribution's files under site-packages (its scripts stay behind)."""
    for file in installed.files or []:
        source = Path(str(installed.locate_file(file)))
        if ".." in file.parts or not source.is_file():
            continue
        target = site_packages / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("client-alone")
    wheel = build_wheel(folder)
    venv = folder / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        ).stdout.strip()
    )
    for installed in closure(needed(wheel_requirements(wheel), set())).values():
        copy_into(installed, site_packages)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "-q", "--no-index", "--no-cache-dir", str(wheel)],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    subprocess.run([*pip, "check"], check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return venv


def in_venv(
    venv: Path, *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A command of the venv, from a folder with no ampfleet source and no `.env`."""
    return subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        cwd=venv,
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(venv), **(env or {})},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


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
