"""PostgreSQL and Redis servers of one's own, on free ports: the test session's shared pair
(tests/support/services.py), and those of tests that stop and start theirs at will without
disturbing the session's."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.ports import free_port, reachable


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
    if "redis-server" in missing_packages():
        raise AssertionError("redis-server is not installed")
    server = PrivateRedis(root, host)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def missing_packages() -> list[str]:
    """The Debian packages these servers need that are not installed."""
    missing = [] if postgres_binaries() else ["postgresql"]
    return missing + ([] if shutil.which("redis-server") else ["redis-server"])


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL server's bin folder (Debian's layout), if any."""
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return Path(versions[-1]).parent if versions else None


def _version(initdb: str) -> int:
    return int(Path(initdb).parent.parent.name.split(".")[0])


def _server_user() -> str | None:
    """Who runs the server: initdb refuses root, so root hands it to the `postgres` user
    Debian's package creates, or to `nobody` where there is none; anyone else runs it."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "nobody"
    return "postgres"


class PrivatePostgres:
    """A throwaway cluster (initdb) run by an unprivileged user.

    `durable=False` turns off fsync and synchronous commit: for a server whose data nobody
    needs after the session, no test of which crashes it."""

    def __init__(self, host: str = "127.0.0.1", *, durable: bool = True) -> None:
        self.host = host
        self.durable = durable
        binaries = postgres_binaries()
        if binaries is None:
            raise AssertionError("PostgreSQL server binaries are not installed")
        self.bin = binaries
        self.user = _server_user()
        # Not under pytest's tmp_path: the server's user must be able to reach the folder.
        self.root = Path(tempfile.mkdtemp(prefix="ampfleet-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "pgdata"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        done = subprocess.run([*prefix, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(args[:1])} failed: {done.stderr.strip()[-2000:]}")

    def init(self) -> None:
        self.data.mkdir(parents=True)
        if self.user:
            account = pwd.getpwnam(self.user)
            os.chown(self.data, account.pw_uid, account.pw_gid)
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"
        )
        if self.host != "127.0.0.1":  # clients on the listening address's subnet, too
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses={self.host}"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
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
def private_postgres(host: str = "127.0.0.1", *, durable: bool = True) -> Iterator[PrivatePostgres]:
    """`host`: the address it listens on, trusting clients on that address's subnet."""
    server = PrivatePostgres(host, durable=durable)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if reachable((host, server.port)):
            server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
