"""A link cut during a multi-host job: the attempt fails, and once the link is back the job
restarts from its checkpoint and SUCCEEDS, every metric point of each step stored once.

The host that is cut is the one of node rank 0, whose agent stores rank 0's records: while
cut it also loses PostgreSQL and Redis (they listen on the root side of the bed), so it can
neither report nor see that its attempt was ended; it must carry on when the link is back.
The cut lasts past the job's process-group timeout, whose end of the cut-off rank's wait is
the backstop for an agent that cannot act.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ampfleet.workers.agent import COLLECTIVE_TIMEOUT_MARGIN_S
from ampfleet.workers.rundir import RunDir
from tests.faults.reported import count_reported
from tests.network.conftest import BedFleet, bed_fleet
from tests.support.factories import job_spec
from tests.support.fleet import placed_on, transitions

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.usefixtures("netbed_available")]

HANG_TIMEOUT_S = 10  # the shortest the spec allows
COLLECTIVE_TIMEOUT_S = HANG_TIMEOUT_S + COLLECTIVE_TIMEOUT_MARGIN_S  # the job's process groups'


def _checkpointed(fleet: BedFleet, job_id: str) -> list[int]:
    items = fleet.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    return [item["step"] for item in items]


def _attempt_ended(fleet: BedFleet, job_id: str) -> bool:
    return any(e["attempt"] == 1 and e["to_state"] == "RESTARTING" for e in fleet.events(job_id))


def _alive(fleet: BedFleet, node: str) -> bool:
    nodes = fleet.http.get("/v1/nodes").json()["items"]
    return any(n["id"] == node and n["alive"] for n in nodes)


def test_a_cut_link_fails_the_attempt_and_the_job_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    with bed_fleet(tmp_path, hosts=2, rate="1gbit", cpu_slots=1) as fleet:
        job = fleet.submit(
            job_spec(
                resources={"nodes": 2, "procs_per_node": 1},
                stop={"max_steps": 400},
                checkpoint={"every_steps": 40},
                log_every_steps=10,
                monitoring={"hang_timeout_s": HANG_TIMEOUT_S},
            )
        )
        job_id = job["id"]
        fleet.wait_until(
            lambda: _checkpointed(fleet, job_id), timeout=240, what="a first checkpoint"
        )
        checkpointed = max(_checkpointed(fleet, job_id))
        cut = placed_on(fleet, job_id, 1)[0]  # node rank 0: it stores rank 0's records
        cut_rank = RunDir.for_attempt(fleet.node_data_dir(cut) / "runs", job_id, 1, 0)
        with fleet.bed.link_cut(fleet.node_names.index(cut)):
            # The node still connected sees its rank stop moving after the hang timeout.
            fleet.wait_until(
                lambda: _attempt_ended(fleet, job_id),
                timeout=COLLECTIVE_TIMEOUT_S + 60,
                what="the attempt across the cut link to fail",
            )
            # The cut node's agent can neither see that nor stop its rank (it cannot reach
            # the database): the rank ends itself when its collective times out, and the
            # platform takes the node for dead (its heartbeats are past the node timeout),
            # so that it must come back, not merely carry on after a delay.
            fleet.wait_until(
                lambda: cut_rank.failures() and not _alive(fleet, cut),
                timeout=COLLECTIVE_TIMEOUT_S + 60,
                what=f"{cut}'s rank to time out and {cut} to be seen dead",
            )
        [timed_out] = cut_rank.failures()
        assert "Timed out" in timed_out["message"], timed_out
        done = fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=300)

        assert done["attempt"] == 2
        history = transitions(fleet, job_id)
        [(_, _, why)] = [t for t in history if t[1] == "RESTARTING"]
        assert why in {"hung", "ranks_lost", "node_lost"}, history
        resumed = [e for e in fleet.events(job_id) if e["to_state"] == "RUNNING"][-1]
        assert resumed["attempt"] == 2
        found = re.search(r"resumed at step (\d+)", resumed["message"])
        assert found is not None, resumed["message"]
        assert int(found.group(1)) >= checkpointed
        reported = count_reported(fleet.env["AMPFLEET_DATABASE_URL"], [job_id])
        print(f"\nlink cut: {why}; {reported.summary()}; {fleet.tally()}")
        reported.assert_complete()
        assert fleet.server_errors == [], fleet.tally()
