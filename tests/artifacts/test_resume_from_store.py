"""End to end with real processes on PostgreSQL, Redis and SeaweedFS: checkpoints travel
through the object store, not a shared disk. (Long tier: a node is killed mid-run.)"""

from __future__ import annotations

import re
import signal
import uuid
from typing import Any

import pytest

from tests.conftest import S3_TEST_BUCKET
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, FleetFactory, placed_on, rank_processes
from tests.support.seaweedfs import S3Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _checkpoints(fleet: Fleet, job_id: str) -> list[dict[str, Any]]:
    response = fleet.http.get(f"/v1/jobs/{job_id}/checkpoints")
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


def test_a_job_whose_node_dies_resumes_on_another_from_the_store(
    make_fleet: FleetFactory, seaweedfs: S3Server
) -> None:
    store = seaweedfs.environment(S3_TEST_BUCKET, prefix=f"e2e{uuid.uuid4().hex[:10]}")
    fleet = make_fleet(
        nodes=("node-a", "node-b"),
        node_data_dirs=True,  # no disk in common: only the store carries checkpoints
        extra_env={"AMPFLEET_NODE_TIMEOUT_S": "4", **store},
    )
    job = fleet.submit(
        job_spec(stop={"max_steps": 3000}, checkpoint={"every_steps": 100}, log_every_steps=50)
    )
    fleet.wait_until(
        lambda: any(c["step"] >= 300 for c in _checkpoints(fleet, job["id"])),
        timeout=180,
        what="a checkpoint past step 300 listed in the store",
    )
    [victim] = placed_on(fleet, job["id"], 1)
    listed_before_kill = max(c["step"] for c in _checkpoints(fleet, job["id"]))
    fleet.kill(f"worker-{victim}", signal.SIGKILL)
    fleet.wait_until(lambda: rank_processes(job["id"]) == [], timeout=30, what="ranks gone")

    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
    [survivor] = placed_on(fleet, job["id"], 2)
    assert survivor != victim
    assert done["attempt"] == 2
    resumed = [e for e in fleet.events(job["id"]) if e["to_state"] == "RUNNING"][-1]
    step = int(re.search(r"resumed at step (\d+)", resumed["message"]).group(1))
    assert step >= listed_before_kill
    # The survivor never ran attempt 1: whatever it resumed from came from the store.
    survivor_runs = fleet.node_data_dir(survivor) / "runs" / job["id"]
    assert sorted(p.name for p in survivor_runs.iterdir()) == ["attempt-2"]

    listed = _checkpoints(fleet, job["id"])
    assert len(listed) == 2  # keep_last, applied to the store
    assert listed[-1]["step"] == 3000
    assert listed[-1]["attempt"] == 2
    assert listed[-1]["lineage"]["precision"] == "bf16"
    assert listed[-1]["lineage"]["world_size"] == 2
