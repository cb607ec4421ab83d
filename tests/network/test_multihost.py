"""Multi-node jobs across hosts of the network bed, through the normal submit path: the
ranks rendezvous and reduce over links shaped to 1 Gbit/s, as between real machines."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.network.conftest import BedFleet, bed_fleet
from tests.support.factories import job_spec

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("netbed_available")]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BedFleet]:
    with bed_fleet(tmp_path_factory.mktemp("bed"), hosts=2, rate="1gbit", cpu_slots=2) as f:
        yield f


def _run_across_both_hosts(fleet: BedFleet, procs_per_node: int) -> None:
    spec = job_spec(
        resources={"nodes": 2, "procs_per_node": procs_per_node},
        stop={"max_steps": 30},
        precision="bf16",
        allreduce_dtype="bf16",
    )
    job = fleet.submit(spec)
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=240)
    assert done["latest_metrics"]["loss"] > 0
    events = fleet.events(job["id"])
    started = [e for e in events if e["to_state"] == "RUNNING"]
    assert started[0]["message"].startswith(f"{2 * procs_per_node} ranks on gloo")
    placed = [e for e in events if e["to_state"] == "SCHEDULED"]
    assert "node-a" in placed[0]["message"]
    assert "node-b" in placed[0]["message"]


def test_two_hosts_by_one_rank_succeed_over_a_shaped_link(fleet: BedFleet) -> None:
    """Each host's name resolves to 127.0.0.1 inside its namespace: gloo would tell the
    other host to connect there unless ranks talk on the interface of the node address."""
    _run_across_both_hosts(fleet, procs_per_node=1)


@pytest.mark.slow
def test_two_hosts_by_two_ranks_succeed_over_a_shaped_link(fleet: BedFleet) -> None:
    _run_across_both_hosts(fleet, procs_per_node=2)
