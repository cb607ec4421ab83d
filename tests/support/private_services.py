"""PostgreSQL and Redis servers of a test's own, on free ports, that it may stop and start
at will without disturbing the shared ones other tests use."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.fleet import free_port
from tests.support.services import reachable


def _wait(port: int, up: bool, timeout: float = 30, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reachable((host, port), timeout=0.5) == up:
            return
        time.sleep(0.1)
    raise AssertionError(f"port {port} did not go {'up' if up else 'down'}")


class PrivateRedis:
    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.host = host
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                self.host,
                # Protected mode answers only loopback clients while no password is set.
                "--protected-mode",
                "yes" if self.host == "127.0.0.1" else "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(self.port, up=True, host=self.host)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        _wait(self.port, up=False, host=self.host)


@contextmanager
def private_redis(root: Path, host: str = "127.0.0.1") -> Iterator[PrivateRedis]:
    """`host`: the address it listens on (a network bed's root side, say)."""
    if shutil.which("redis-server") is None:
        raise AssertionError("redis-server is not installed")
    server = PrivateRedis(root, host)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class PrivatePostgres:
    """A throwaway cluster (initdb) run by the `postgres` system user."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not versions:
            raise AssertionError("PostgreSQL server binaries are not installed")
        self.bin = Path(versions[-1])
        # Not under pytest's tmp_path: the postgres user must be able to reach the folder.
        self.root = Path(tempfile.mkdtemp(prefix="ampfleet-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "pgdata"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True)

    def init(self) -> None:
        self.data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"
        )
        if self.host != "127.0.0.1":  # clients on the listening address's subnet, too
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses={self.host}"
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.data / "server.log"),
            "start",
        )
        _wait(self.port, up=True, host=self.host)

    def stop(self) -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"
        )
        _wait(self.port, up=False, host=self.host)


@contextmanager
def private_postgres(host: str = "127.0.0.1") -> Iterator[PrivatePostgres]:
    """`host`: the address it listens on, trusting clients on that address's subnet."""
    server = PrivatePostgres(host)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if reachable((host, server.port)):
            server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
