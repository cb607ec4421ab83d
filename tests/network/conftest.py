"""Tests on the multi-host network bed (tests/support/netbed.py): skipped, with the reason,
where this process may not create network namespaces."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet
from tests.support.netbed import NetworkBed, network_bed, unavailable_reason
from tests.support.private_services import private_postgres, private_redis


@pytest.fixture(scope="session")
def netbed_available() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"network bed unavailable: {reason}")


class BedFleet(Fleet):
    """A fleet whose worker node i runs inside host i of a network bed, with that host's
    address as its node address; the api and scheduler stay in the root namespace."""

    def __init__(self, root: Path, bed: NetworkBed, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.bed = bed

    def start_worker(self, node: str) -> None:
        host = self.node_names.index(node)
        env = {
            **self.env,
            "AMPFLEET_NODE_NAME": node,
            "AMPFLEET_NODE_ADDRESS": self.bed.address(host),
        }
        log = (self.root / f"worker-{node}.log").open("ab")
        self.processes[f"worker-{node}"] = subprocess.Popen(
            self.bed.command(host, [sys.executable, "-m", "ampfleet.cli", "worker"]),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )


@contextmanager
def bed_fleet(root: Path, *, hosts: int, rate: str, cpu_slots: int) -> Iterator[BedFleet]:
    """`hosts` worker nodes on a bed whose links run at `rate`, with PostgreSQL and Redis of
    their own listening on the bed's root address: every byte a node exchanges, with the
    services or with another node, crosses its link."""
    with ExitStack() as stack:
        bed = stack.enter_context(network_bed(hosts, rate=rate))
        postgres = stack.enter_context(private_postgres(bed.root_address))
        broker = stack.enter_context(private_redis(root, bed.root_address))
        root.mkdir(parents=True, exist_ok=True)
        fleet = BedFleet(
            root / "fleet",
            bed,
            database_url=postgres.url,
            broker_url=broker.url,
            nodes=tuple(f"node-{chr(ord('a') + host)}" for host in range(hosts)),
            cpu_slots=cpu_slots,
        )
        stack.callback(fleet.stop)
        yield fleet.start()
