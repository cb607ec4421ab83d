"""Make sure PostgreSQL and Redis are up on their default local ports, or say what is missing."""

from __future__ import annotations

import glob
import shutil
import socket
import subprocess
import time

POSTGRES = ("127.0.0.1", 5432)
REDIS = ("127.0.0.1", 6379)


def reachable(address: tuple[str, int], timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def _start_postgres() -> None:
    clusters = sorted(glob.glob("/etc/postgresql/*"))
    if clusters and shutil.which("pg_ctlcluster"):
        version = clusters[-1].rsplit("/", 1)[-1]
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"],
            check=False,
            capture_output=True,
        )


def _start_redis() -> None:
    if shutil.which("redis-server"):
        subprocess.run(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            check=False,
            capture_output=True,
        )


def ensure_services() -> list[str]:
    """Start what is down; return the names of services still unreachable."""
    missing = []
    for name, address, start in (
        ("PostgreSQL on 127.0.0.1:5432", POSTGRES, _start_postgres),
        ("Redis on 127.0.0.1:6379", REDIS, _start_redis),
    ):
        if reachable(address):
            continue
        start()
        for _ in range(50):
            if reachable(address):
                break
            time.sleep(0.2)
        else:
            missing.append(name)
    return missing
