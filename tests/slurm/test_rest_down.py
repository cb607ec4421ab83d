"""A slurmrestd that never finishes an answer holds up nothing but the Slurm pool: every
call to it runs on the Slurm backend's own thread, outside any transaction, so jobs on
ampfleet's own nodes are placed and run as ever. No Slurm needed: the "slurmrestd" is a
server of the test's own that sends its answer a byte every few seconds, so that no read
timeout of the client ever fires (a scheduling pass that called it would wait forever)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import FleetFactory
from tests.support.rest_front import TRICKLE, rest_front

pytestmark = pytest.mark.e2e
WAIT_S = 300.0  # a bound on waiting, never an assertion about speed


def test_a_slurmrestd_that_never_answers_stops_no_placement_on_ampfleet_nodes(
    make_fleet: FleetFactory,
) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="front-") as folder,
        rest_front(Path(folder) / "rest.socket") as front,
    ):
        front.policy = lambda _seen: TRICKLE
        fleet = make_fleet(
            nodes=("node-a",),
            extra_env={"AMPFLEET_SLURM_POOL": "hpc", "AMPFLEET_SLURM_URL": front.url},
        )
        fleet.wait_until(lambda: bool(front.seen), timeout=WAIT_S, what="a call to slurmrestd")
        job = fleet.submit(job_spec(stop={"max_steps": 5}))
        fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
        assert len(front.seen) == 1  # the one call, still waiting for its answer
        nodes = fleet.http.get("/v1/nodes").json()["items"]
        assert [n["id"] for n in nodes] == ["node-a"]  # the pool was never read
