"""What the egress filter's tests share: a node whose sandbox uids are the test's own (no
other process on this machine uses them, so the rules a test sets touch nobody else), a
network bed whose hosts are a multi-node attempt's peer and a stranger, listeners in its
hosts and on this host's loopback, and a probe run as an uid the filter does not hold, which
shows each listener is there to be reached."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ampfleet.core.sandbox import Confinement, bubblewrap_problem, sandboxed
from ampfleet.core.settings import get_settings
from ampfleet.workers import egress
from tests.support.env import environment
from tests.support.netbed import NetworkBed, NetworkBedUnavailableError, network_bed

UID_COUNT = 8
FIRST_UID = 400_000 + (os.getpid() % 10_000) * UID_COUNT
"""This test process's own range, far from the 200000 the rest of the suite's sandboxes use."""

needs_filter = pytest.mark.skipif(
    bubblewrap_problem() is not None or egress.problem() is not None,
    reason=f"needs bubblewrap and the egress filter: {bubblewrap_problem() or egress.problem()}",
)

SERVE = """
import socket, sys, threading
servers = []
for port in map(int, sys.argv[1:]):
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen()
    servers.append(server)
print(" ".join(str(s.getsockname()[1]) for s in servers), flush=True)

def serve(server):
    while True:
        server.accept()[0].close()

for server in servers:
    threading.Thread(target=serve, args=(server,), daemon=True).start()
sys.stdin.read()
"""


@contextmanager
def node_environment(tmp_path: Path, **extra: str) -> Iterator[None]:
    values = {
        "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        "AMPFLEET_SANDBOX_TMP_MB": "64",
        "AMPFLEET_SANDBOX_FIRST_UID": str(FIRST_UID),
        "AMPFLEET_SANDBOX_UID_COUNT": str(UID_COUNT),
        **extra,
    }
    try:
        with environment(values):
            yield
    finally:
        assert held_uids() == [], "a test left egress rules behind"
        _drop_empty_table()


def _drop_empty_table() -> None:
    """The table itself, where no uid's chain is left in it: a worker never drops it (another
    process could be adding a chain between its look and the drop), but here the rules are
    the test's own, and the machine is left as it was."""
    listed = subprocess.run(
        ["nft", "list", "table", *egress.TABLE.split()], capture_output=True, text=True, check=False
    )
    if listed.returncode == 0 and not any(egress.CHAIN.match(w) for w in listed.stdout.split()):
        subprocess.run(["nft", "delete", "table", *egress.TABLE.split()], check=False)


def held_uids() -> list[int]:
    """The uids of this test's range that some chain of the filter holds."""
    return [uid for uid in range(FIRST_UID, FIRST_UID + UID_COUNT) if egress.rules_of(uid)]


@contextmanager
def bed_of_two() -> Iterator[NetworkBed]:
    try:
        with network_bed(2) as bed:
            yield bed
    except NetworkBedUnavailableError as exc:
        pytest.skip(f"network bed unavailable: {exc}")


@contextmanager
def listening_in(bed: NetworkBed, host: int, ports: list[int]) -> Iterator[list[int]]:
    """TCP listeners on every address of bed host `host` (port 0: one the kernel picks in
    its ephemeral range), accepting until the block ends; their ports."""
    server = subprocess.Popen(
        bed.command(host, [sys.executable, "-c", SERVE, *map(str, ports)]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield [int(port) for port in server.stdout.readline().split()]
    finally:
        server.kill()
        server.wait()


@contextmanager
def loopback_listener() -> Iterator[tuple[str, int]]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield "127.0.0.1", int(server.getsockname()[1])


def low_port() -> int:
    """A port below the ephemeral range, as the control plane's services listen on."""
    return egress.ephemeral_ports()[0] - 1


def unfiltered_probe(targets: list[tuple[str, int]], folder: Path) -> dict[str, str]:
    """The probe's connections from a sandbox on the host's network as an uid of the test's
    range that no rule holds: what a multi-node attempt reached before the filter."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = [
        sys.executable,
        "-m",
        "ampfleet.workers.sandbox_probe",
        json.dumps({"connect": targets}),
    ]
    command = sandboxed(
        probe,
        data_dir=get_settings().data_dir.resolve(),
        writable=[folder],
        readable=[],
        devices=[],
        confinement=Confinement(uid=FIRST_UID + UID_COUNT - 1, own_network=False),
    )
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
