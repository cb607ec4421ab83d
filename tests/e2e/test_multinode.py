"""One job spanning two worker processes that act as two nodes (own queues, own node ids),
rendezvousing through torchrun's c10d backend on the first allocated node."""

from __future__ import annotations

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import rank_processes

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # long tier: make test has two hosts in tests/network/test_multihost.py
def test_two_node_gloo_job_end_to_end(make_fleet) -> None:
    fleet = make_fleet("postgres+redis", nodes=("node-a", "node-b"), cpu_slots=1)
    spec = job_spec(
        resources={"nodes": 2, "procs_per_node": 1},
        stop={"max_steps": 150},
        eval_every_steps=50,
        precision="bf16",
        allreduce_dtype="bf16",
    )
    job = fleet.submit(spec)
    running = fleet.wait_for_state(job["id"], {"RUNNING", "SUCCEEDED"})
    placed = [e for e in fleet.events(job["id"]) if e["to_state"] == "SCHEDULED"]
    assert "node-a" in placed[0]["message"]
    assert "node-b" in placed[0]["message"]
    if running["state"] == "RUNNING":
        nodes = {n["id"]: n for n in fleet.http.get("/v1/nodes").json()["items"]}
        assert nodes["node-a"]["used_slots"] == nodes["node-b"]["used_slots"] == 1

    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    assert done["latest_metrics"]["val_accuracy"] >= 0.9
    started = [e for e in fleet.events(job["id"]) if e["to_state"] == "RUNNING"]
    assert started[0]["message"].startswith("2 ranks on gloo")
    # The node whose torchrun exits first records the outcome; the other stops its own
    # torchrun (if still tearing down) as soon as it sees the job is over, at its next pass.
    fleet.wait_until(lambda: rank_processes(job["id"]) == [], timeout=30, what="ranks gone")
    # Each node frees its own share at the pass after its torchrun exited: soon, not at once.
    fleet.wait_until(
        lambda: all(n["used_slots"] == 0 for n in fleet.http.get("/v1/nodes").json()["items"]),
        timeout=30,
        what="both nodes' slots freed",
    )


@pytest.mark.slow
def test_every_node_watches_its_own_ranks_past_the_hang_timeout(make_fleet) -> None:
    """Rank 0's records exist on node 0 only: a node that took them for its only news saw
    silence from the start and stopped its share as hung once the start timeout was up. Each
    node now hears its own ranks' heartbeats, so a two-node job trains well past both."""
    fleet = make_fleet(
        "postgres+redis",
        nodes=("node-a", "node-b"),
        cpu_slots=1,
        extra_env={"AMPFLEET_START_TIMEOUT_S": "45"},
    )
    spec = job_spec(
        resources={"nodes": 2, "procs_per_node": 1},
        stop={"max_runtime_s": 90},
        monitoring={"hang_timeout_s": 10},
        retry={"max_restarts": 0},
    )
    job = fleet.submit(spec)
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED", "FAILED"}, timeout=400)
    assert done["state"] == "SUCCEEDED", done["failure_reason"]
    assert done["attempt"] == 1
    assert not [e for e in fleet.events(job["id"]) if e["reason"] == "hung"]
