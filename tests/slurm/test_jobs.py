"""ampfleet jobs on the Slurm pool, end to end: real API and scheduler processes, no ampfleet
worker node, the harness's real Slurm (two node daemons where the build allows) whose batch
jobs run `ampfleet run-attempt` on each node."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet
from tests.support.slurm import PARTITION, SlurmCluster

pytestmark = pytest.mark.e2e
POOL = "hpc"
WAIT_S = 300.0  # a bound on waiting, never an assertion about speed
LOST_NODE = {"slurm_node_fail", "slurm_requeued"}


@pytest.fixture
def fleet(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Fleet]:
    env = {
        "AMPFLEET_SLURM_POOL": POOL,
        "AMPFLEET_SLURM_URL": f"unix:{slurm_cluster.socket_path}",
        "AMPFLEET_SLURM_PARTITION": PARTITION,
        "AMPFLEET_SLURM_TIME_MARGIN_S": "60",
        "SLURM_CONF": str(slurm_cluster.conf),
        "AMPFLEET_SANDBOX": "none",
    }
    with running_fleet(tmp_path / "fleet", nodes=(), extra_env=env) as fleet:
        fleet.wait_until(
            lambda: len(pool_nodes(fleet)) == len(slurm_cluster.node_names),
            timeout=WAIT_S,
            what="the Slurm pool's nodes in /v1/nodes",
        )
        yield fleet


def pool_nodes(fleet: Fleet) -> list[dict[str, Any]]:
    items = fleet.http.get("/v1/nodes").json()["items"]
    return [n for n in items if n["labels"].get("pool") == POOL]


def spec_on_slurm(cluster: SlurmCluster, **overrides: Any) -> dict[str, Any]:
    two_nodes = len(cluster.node_names) >= 2
    shape = {"nodes": 2, "procs_per_node": 1} if two_nodes else {"nodes": 1, "procs_per_node": 2}
    return job_spec(resources={**shape, "selector": {"pool": POOL}}, **overrides)


def slurm_jobs_of(cluster: SlurmCluster, job_id: str) -> list[str]:
    out = cluster.command("squeue", "--noheader", "--states=all", "--format=%i %j %T")
    return [line for line in out.splitlines() if job_id in line]


def rank0_logs(fleet: Fleet, job_id: str) -> list[dict[str, Any]]:
    """Every stored line of rank 0, page by page (a page is bounded)."""
    lines: list[dict[str, Any]] = []
    after = 0
    while True:
        page = fleet.http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "after": after}).json()
        lines.extend(page["items"])
        if not page["items"] or page["next_after"] is None:
            return lines
        after = page["next_after"]


def test_the_pool_shows_the_capacity_slurm_reports(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    for node in pool_nodes(fleet):
        assert node["labels"]["backend"] == "slurm"
        assert node["slots"] == slurm_cluster.cpus_per_node
        assert node["labels"]["slurm_cpus"] == str(slurm_cluster.cpus_per_node)
        assert node["alive"]


def test_a_digits_job_runs_as_one_slurm_job_and_succeeds(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    steps = 30
    job = fleet.submit(spec_on_slurm(slurm_cluster, stop={"max_steps": steps}, log_every_steps=1))
    seen_in_squeue: list[str] = []

    def running_in_slurm() -> bool:
        seen_in_squeue.extend(n for n in slurm_cluster.squeue_names() if job["id"] in n)
        return bool(seen_in_squeue) or fleet.job(job["id"])["state"] == "SUCCEEDED"

    fleet.wait_until(running_in_slurm, timeout=WAIT_S, what="the job in squeue")
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert seen_in_squeue == [f"ampfleet-{job['id']}-1"] * len(seen_in_squeue)
    assert done["precision"]["effective"] == "bf16"
    assert done["allreduce_dtype"]["effective"] == "bf16"
    events = fleet.events(job["id"])
    submitted = [e for e in events if e["reason"] == "slurm_submitted"]
    assert len(submitted) == 1
    transitions = [e["to_state"] for e in events if e["kind"] == "transition"]
    assert transitions == ["QUEUED", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"]
    metrics = fleet.http.get(f"/v1/jobs/{job['id']}/metrics").json()
    series = {s["name"]: s["points"] for s in metrics["series"]}
    assert [p["step"] for p in series["loss"]] == list(range(1, steps + 1))
    logs = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"limit": 1000}).json()["items"]
    assert {line["rank"] for line in logs} == {0, 1}
    assert any(f"step {steps}/{steps}" in line["line"] for line in logs)
    model = fleet.http.get(f"/v1/jobs/{job['id']}/artifacts/model.safetensors")
    assert model.status_code == 200
    assert len(model.content) > 1000
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 1


def test_cancel_through_ampfleet_ends_the_slurm_job(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    job = fleet.submit(spec_on_slurm(slurm_cluster, stop={"max_steps": 100_000}))
    fleet.wait_for_state(job["id"], {"RUNNING"}, timeout=WAIT_S)
    assert fleet.http.post(f"/v1/jobs/{job['id']}/cancel").status_code in (200, 202)
    fleet.wait_for_state(job["id"], {"CANCELLED"}, timeout=WAIT_S)
    fleet.wait_until(
        lambda: not any(job["id"] in n for n in slurm_cluster.squeue_names()),
        timeout=WAIT_S,
        what="the Slurm job to end",
    )


def test_a_slurm_side_scancel_is_seen_with_the_reason_and_retried(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    job = fleet.submit(
        spec_on_slurm(slurm_cluster, stop={"max_steps": 100_000}, retry={"max_restarts": 1})
    )
    fleet.wait_for_state(job["id"], {"RUNNING"}, timeout=WAIT_S)
    slurm_cluster.command("scancel", f"--name=ampfleet-{job['id']}-1")
    fleet.wait_until(
        lambda: fleet.job(job["id"])["attempt"] >= 2, timeout=WAIT_S, what="a second attempt"
    )
    reasons = {e["reason"] for e in fleet.events(job["id"]) if e["attempt"] == 1}
    assert reasons & {"slurm_signalled", "slurm_cancelled"}, reasons
    fleet.wait_until(
        lambda: "slurm_cancelled" in {e["reason"] for e in fleet.events(job["id"])},
        timeout=WAIT_S,
        what="Slurm's end state among the events",
    )
    fleet.http.post(f"/v1/jobs/{job['id']}/cancel")
    fleet.wait_for_state(job["id"], {"CANCELLED"}, timeout=WAIT_S)


def test_a_slurm_side_scancel_mid_run_retries_and_resumes_from_the_checkpoint(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    steps, every = 600, 20
    job = fleet.submit(
        spec_on_slurm(
            slurm_cluster,
            stop={"max_steps": steps},
            log_every_steps=1,
            checkpoint={"every_steps": every},
            retry={"max_restarts": 1},
        )
    )
    fleet.wait_until(
        lambda: fleet.job(job["id"])["progress"]["step"] >= 3 * every,
        timeout=WAIT_S,
        what="a checkpoint of the first attempt",
    )
    slurm_cluster.command("scancel", f"--name=ampfleet-{job['id']}-1")
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert done["attempt"] == 2
    events = fleet.events(job["id"])
    reasons = {e["reason"] for e in events if e["attempt"] == 1}
    assert reasons & {"slurm_signalled", "slurm_cancelled"}, reasons
    resumed = next(e for e in events if e["attempt"] == 2 and e["to_state"] == "RUNNING")
    found = re.search(r"resumed at step (\d+)", resumed["message"])
    assert found, (resumed["message"], events)
    checkpointed = int(found.group(1))
    assert checkpointed >= every
    metrics = fleet.http.get(f"/v1/jobs/{job['id']}/metrics").json()
    points = {s["name"]: s["points"] for s in metrics["series"]}["loss"]
    assert [p["step"] for p in points] == list(range(1, steps + 1))
    logs = rank0_logs(fleet, job["id"])
    # The second attempt's first step is the one after the checkpoint, not step 1.
    first_step_of_2 = [
        int(m.group(1))
        for line in logs
        if line["attempt"] == 2 and (m := re.search(r"step (\d+)/", line["line"]))
    ]
    assert first_step_of_2, "the second attempt logged no step"
    assert first_step_of_2[0] == checkpointed + 1 > 1
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 2


def test_a_node_marked_down_is_seen_with_the_reason_and_retried(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    node = slurm_cluster.node_names[-1]
    job = fleet.submit(
        spec_on_slurm(
            slurm_cluster,
            stop={"max_steps": 300},
            log_every_steps=1,
            checkpoint={"every_steps": 20},
            retry={"max_restarts": 1},
        )
    )
    fleet.wait_until(
        lambda: fleet.job(job["id"])["progress"]["step"] >= 40,
        timeout=WAIT_S,
        what="the first attempt running",
    )
    try:
        # Drained first, so that it stays out of service once down (ReturnToService=2 would
        # bring a merely DOWN node back as soon as its slurmd answers); DOWN ends its jobs.
        for state in ("drain", "down"):
            slurm_cluster.command(
                "scontrol", "update", f"nodename={node}", f"state={state}", "reason=test-node-down"
            )
        fleet.wait_until(
            lambda: LOST_NODE & {e["reason"] for e in fleet.events(job["id"])},
            timeout=WAIT_S,
            what="the node's failure among the job's events",
        )
        fleet.wait_until(
            lambda: any(
                n["labels"]["slurm_node"] == node
                and n["state"] == "cordoned"
                and "test-node-down" in (n["state_reason"] or "")
                for n in pool_nodes(fleet)
            ),
            timeout=WAIT_S,
            what="the down node cordoned in /v1/nodes with Slurm's reason",
        )
    finally:
        with contextlib.suppress(RuntimeError):  # back in service already
            slurm_cluster.command("scontrol", "update", f"nodename={node}", "state=resume")
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert done["attempt"] == 2
    failed = next(e for e in fleet.events(job["id"]) if e["reason"] in LOST_NODE)
    assert failed["attempt"] == 1
    # NODE_FAIL where the submit turned Slurm's requeue off; 22.05's v0.0.38 cannot, and
    # Slurm requeues the job instead, which ampfleet cancels, naming the node and its reason.
    assert "NODE_FAIL" in failed["message"] or "test-node-down" in failed["message"]
    metrics = fleet.http.get(f"/v1/jobs/{job['id']}/metrics").json()
    points = {s["name"]: s["points"] for s in metrics["series"]}["loss"]
    assert [p["step"] for p in points] == list(range(1, 301))


def test_a_scheduler_killed_right_after_submitting_leaves_one_slurm_job(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    job = fleet.submit(spec_on_slurm(slurm_cluster, stop={"max_steps": 10}))
    fleet.wait_until(
        lambda: bool(slurm_jobs_of(slurm_cluster, job["id"])),
        timeout=WAIT_S,
        what="the Slurm job",
    )
    fleet.kill("scheduler", signal.SIGKILL)
    fleet.start_scheduler("scheduler")
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 1


def test_a_job_larger_than_the_partition_is_refused_saying_so(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    too_many = len(slurm_cluster.node_names) + 1
    spec = job_spec(resources={"nodes": too_many, "procs_per_node": 1, "selector": {"pool": POOL}})
    response = fleet.http.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert "node" in response.text


def test_a_job_that_does_not_name_the_pool_is_refused_saying_how_to_name_it(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    del slurm_cluster  # the pool must exist, and be passed over
    response = fleet.http.post("/v1/jobs", json=job_spec())
    assert response.status_code == 422, response.text
    assert f"pool: {POOL}" in response.json()["error"]["message"]
