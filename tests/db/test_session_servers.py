"""The test session runs on servers of its own (tests/support/services.py): a session started
where no PostgreSQL or Redis runs (a network namespace of its own: nothing listens on the
default ports, as on a bare machine once the packages are installed) starts its own, its
database and Redis tests pass against them, and it leaves nothing behind; an operator's
AMPFLEET_TEST_POSTGRES_URL and AMPFLEET_TEST_REDIS_URL put it on existing servers instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from tests.support.private_services import private_postgres, private_redis
from tests.support.services import POSTGRES_VARIABLE, REDIS_VARIABLE

ROOT = Path(__file__).resolve().parent.parent.parent
# Tests of both servers: the `backend` fixture's PostgreSQL, the `redis_url` fixture's Redis.
INNER_TESTS = (
    "tests/db/test_emptied_between_tests.py",
    "tests/api/test_ratelimit.py::test_two_api_processes_draw_from_one_bucket",
)
NO_DEFAULT_SERVICES = (
    "from tests.support.ports import reachable; "
    "assert not reachable(('127.0.0.1', 5432)) and not reachable(('127.0.0.1', 6379))"
)


def _pytest(prefix: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, *INNER_TESTS],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {POSTGRES_VARIABLE, REDIS_VARIABLE}}


def _namespaces_unavailable() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs util-linux's unshare and iproute2's ip"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else "cannot create a network namespace (needs root)"


@pytest.fixture
def reachable_temp() -> Iterator[Path]:
    """A temporary folder the servers' unprivileged user may enter (pytest's tmp_path is
    root's own)."""
    folder = Path(tempfile.mkdtemp(prefix="ampfleet-session-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(_namespaces_unavailable() is not None, reason=str(_namespaces_unavailable()))
def test_a_session_where_no_server_runs_starts_its_own_and_leaves_nothing(
    reachable_temp: Path,
) -> None:
    inside = f'ip link set lo up && {sys.executable} -c "{NO_DEFAULT_SERVICES}" && exec "$@"'
    done = _pytest(
        ["unshare", "--net", "--", "sh", "-c", inside, "sh"],
        {**_environment(), "TMPDIR": str(reachable_temp)},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert " passed" in done.stdout, done.stdout[-2000:]
    assert "skipped" not in done.stdout, done.stdout[-2000:]
    left = [p.name for p in reachable_temp.iterdir() if p.name.startswith("ampfleet-")]
    assert left == []  # the servers stopped, their folders removed


def test_an_operator_names_the_servers_to_run_on(tmp_path: Path) -> None:
    with private_postgres() as postgres, private_redis(tmp_path) as broker:
        admin = make_url(postgres.url).set(drivername="postgresql")
        with psycopg.connect(admin.render_as_string(), autocommit=True) as conn:
            conn.execute("ALTER DATABASE postgres SET log_statement = 'ddl'")
        given = {
            POSTGRES_VARIABLE: admin.render_as_string(),
            REDIS_VARIABLE: f"redis://127.0.0.1:{broker.port}",
        }
        done = _pytest([], {**_environment(), **given})
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        log = (postgres.data / "server.log").read_text()
        assert 'statement: CREATE DATABASE "ampfleet_test_' in log
        assert 'statement: DROP DATABASE IF EXISTS "ampfleet_test_' in log
        stats = redis.Redis(host="127.0.0.1", port=broker.port).info("commandstats")
        assert stats["cmdstat_flushdb"]["calls"] >= 2  # the redis_url fixture's, both ends
