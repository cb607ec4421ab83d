"""ampfleet jobs on the Slurm pool, end to end: real API and scheduler processes, no ampfleet
worker node, the harness's real Slurm (two nodes on the network bed where it can be built)
whose batch jobs run `ampfleet run-attempt` on each node. One fleet for the module
(conftest.py); the scheduler reaches slurmrestd through a front the tests steer."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import SLURM_USER, TOKEN, WAIT_S, pool_nodes
from tests.support.factories import job_spec
from tests.support.fleet import Fleet
from tests.support.rest_front import FORWARD, ForwardThen, Reply, RestFront, Seen
from tests.support.slurm import NODE_CREDENTIALS, POOL, SlurmCluster

pytestmark = pytest.mark.e2e
LOST_NODE = {"slurm_node_fail", "slurm_requeued", "slurm_node_out_of_service"}


def spec_on_slurm(cluster: SlurmCluster, **overrides: Any) -> dict[str, Any]:
    """Two nodes x 1 rank where the cluster has two nodes, else one node x 2 ranks (for the
    tests that are about Slurm's part, not the gang's shape)."""
    two = cluster.need_nodes(2) is None
    shape = {"nodes": 2, "procs_per_node": 1} if two else {"nodes": 1, "procs_per_node": 2}
    return job_spec(resources={**shape, "selector": {"pool": POOL}}, **overrides)


def slurm_jobs_of(cluster: SlurmCluster, job_id: str) -> list[str]:
    """`<slurm id> <name> <state> <nodes>` of every Slurm job of ampfleet job `job_id`."""
    out = cluster.command("squeue", "--noheader", "--states=all", "--format=%i %j %T %N")
    return [line for line in out.splitlines() if job_id in line]


def loss_steps(fleet: Fleet, job_id: str) -> list[int]:
    metrics = fleet.http.get(f"/v1/jobs/{job_id}/metrics").json()
    return [p["step"] for p in {s["name"]: s["points"] for s in metrics["series"]}["loss"]]


def secrets_of(fleet: Fleet) -> dict[str, str]:
    """What the batch jobs must never carry: the fleet's credentials and its API secret."""
    names = ("AMPFLEET_SECRET_KEY", *NODE_CREDENTIALS)
    return {name: fleet.env[name] for name in names if fleet.env.get(name)}


def test_the_pool_shows_the_capacity_slurm_reports(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    for node in pool_nodes(fleet):
        assert node["labels"]["backend"] == "slurm"
        assert node["slots"] == slurm_cluster.cpus_per_node
        assert node["labels"]["slurm_cpus"] == str(slurm_cluster.cpus_per_node)
        assert node["alive"]


def test_a_digits_job_runs_on_two_slurm_nodes_and_succeeds_carrying_no_secret(
    fleet: Fleet, slurm_cluster: SlurmCluster, front: RestFront
) -> None:
    if reason := slurm_cluster.need_nodes(2):
        pytest.skip(reason)
    steps = 30
    spec = job_spec(
        resources={"nodes": 2, "procs_per_node": 1, "selector": {"pool": POOL}},
        stop={"max_steps": steps},
        log_every_steps=1,
    )
    job = fleet.submit(spec)
    running: list[str] = []
    carried: list[str] = []

    def running_in_slurm() -> bool:
        found = [line for line in slurm_jobs_of(slurm_cluster, job["id"]) if "RUNNING" in line]
        if found and not running:
            running.extend(found)
            # While it runs: everything slurmctld keeps of it, as its administrators see it.
            kept = [p.read_bytes() for p in slurm_cluster.state_files()]
            kept.append(slurm_cluster.command("scontrol", "show", "job", "-dd").encode())
            carried.extend(
                name
                for name, value in secrets_of(fleet).items()
                if any(value.encode() in blob for blob in kept)
            )
            assert any(b"AMPFLEET_DATA_DIR=" in blob for blob in kept)  # read the right files
        return bool(running) or fleet.job(job["id"])["state"] == "SUCCEEDED"

    fleet.wait_until(running_in_slurm, timeout=WAIT_S, what="the job running in squeue")
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert running, "the job was never seen RUNNING in squeue"
    assert carried == []
    (slurm_id, name, _, nodes) = running[0].split()
    assert name == f"ampfleet-{job['id']}-1"
    assert nodes == "node[1-2]"
    assert done["precision"]["effective"] == "bf16"
    assert done["allreduce_dtype"]["effective"] == "bf16"
    events = fleet.events(job["id"])
    assert len([e for e in events if e["reason"] == "slurm_submitted"]) == 1
    transitions = [e["to_state"] for e in events if e["kind"] == "transition"]
    assert transitions == ["QUEUED", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"]
    assert loss_steps(fleet, job["id"]) == list(range(1, steps + 1))
    logs = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"limit": 1000}).json()["items"]
    assert {line["rank"] for line in logs} == {0, 1}
    assert any(f"step {steps}/{steps}" in line["line"] for line in logs)
    model = fleet.http.get(f"/v1/jobs/{job['id']}/artifacts/model.safetensors")
    assert model.status_code == 200
    assert len(model.content) > 1000
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 1
    # The batch job's output (its agents' log) is in the configured folder, not in /tmp.
    output = Path(fleet.env["AMPFLEET_SLURM_OUTPUT_DIR"]) / f"{name}-{slurm_id}.out"
    assert output.exists()
    # Every call to slurmrestd carried the JWT headers, the token read from its file.
    assert front.seen
    assert {s.headers.get("x-slurm-user-name") for s in front.seen} == {SLURM_USER}
    assert {s.headers.get("x-slurm-user-token") for s in front.seen} == {TOKEN}


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


def test_a_scheduler_killed_between_submit_and_commit_leaves_one_slurm_job(
    fleet: Fleet, slurm_cluster: SlurmCluster, front: RestFront
) -> None:
    """The front passes the submit on to slurmrestd, which creates the Slurm job, and kills
    the scheduler before it hears the answer: it never marked the start relayed. The next
    scheduler finds the job by its name instead of submitting it again."""

    def kill_at_submit(seen: Seen) -> Any:
        if seen.method == "POST" and seen.path.endswith("/job/submit"):
            return ForwardThen(lambda: fleet.kill("scheduler"))
        return FORWARD

    front.policy = kill_at_submit
    try:
        job = fleet.submit(spec_on_slurm(slurm_cluster, stop={"max_steps": 10}))
        fleet.wait_until(
            lambda: fleet.processes["scheduler"].poll() is not None,
            timeout=WAIT_S,
            what="the scheduler killed at its submit",
        )
    finally:
        front.policy = lambda _seen: FORWARD
    submits_before = len([s for s in front.seen if s.path.endswith("/job/submit")])
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 1
    fleet.start_scheduler("scheduler")
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 1
    assert len([s for s in front.seen if s.path.endswith("/job/submit")]) == submits_before


def test_a_refused_token_makes_the_start_wait_saying_so_and_a_rotated_one_runs_it(
    fleet: Fleet, slurm_cluster: SlurmCluster, front: RestFront
) -> None:
    """slurmrestd answers 401 to the token in the file (expired); the job is not failed:
    it waits, the job and the pool say why, and once the operator replaces the file with a
    good token it runs. (The harness's 22.05 controller has no JWT plugin: the front plays
    slurmrestd's auth, and passes the rest on.)"""
    token_file = fleet.env["AMPFLEET_SLURM_TOKEN_FILE"]
    good = "token-2"
    # Nothing of the earlier tests holds the pool (their ends are read from Slurm, which
    # this test cuts off): the job is placed at once, or waits for cordoned nodes.
    fleet.wait_until(
        lambda: all(
            n["free_slots"] == n["slots"] and n["state"] == "ready" for n in pool_nodes(fleet)
        ),
        timeout=WAIT_S,
        what="the pool idle",
    )

    def check_token(seen: Seen) -> Any:
        if seen.headers.get("x-slurm-user-token") != good:
            return Reply(401, {"errors": [{"error": "Authentication failure"}]})
        return FORWARD

    front.policy = check_token
    try:
        job = fleet.submit(spec_on_slurm(slurm_cluster, stop={"max_steps": 10}))
        fleet.wait_until(
            lambda: all(
                "HTTP 401" in (n["state_reason"] or "") and n["state"] == "cordoned"
                for n in pool_nodes(fleet)
            ),
            timeout=WAIT_S,
            what="the pool's nodes cordoned saying slurmrestd refused the token",
        )
        # Placed before the pool was cordoned, its start waits saying why; placed after, it
        # waits in the queue for the cordoned nodes. Either way it is not failed.
        try:
            fleet.wait_until(lambda: said_why(fleet, job["id"]), timeout=WAIT_S, what="why")
        except AssertionError:
            raise AssertionError((fleet.job(job["id"]), fleet.events(job["id"]))) from None
        assert fleet.job(job["id"])["state"] in {"QUEUED", "SCHEDULED"}
        with open(token_file, "w") as rotated:
            rotated.write(good)
        done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    finally:
        front.policy = lambda _seen: FORWARD
        with open(token_file, "w") as restored:
            restored.write(TOKEN)
    assert done["attempt"] == 1
    assert "slurm_refused" not in [e["reason"] for e in fleet.events(job["id"])]


def said_why(fleet: Fleet, job_id: str) -> bool:
    waits = [e for e in fleet.events(job_id) if e["reason"] == "slurm_start_waits"]
    if waits:
        assert "credentials" in waits[0]["message"], waits
        return True
    pending = fleet.job(job_id)["queue"]["pending_reason"] or ""
    return "401" in pending or "cordoned" in pending


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


# -- the long tier: a run interrupted mid-way, resumed from its checkpoint --------------------


def first_step_of_attempt(fleet: Fleet, job_id: str, attempt: int) -> int:
    """The first step rank 0 logged in `attempt`."""
    after = 0
    for _ in range(1000):
        page = fleet.http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "after": after}).json()
        for line in page["items"]:
            found = re.search(r"step (\d+)/", line["line"])
            if line["attempt"] == attempt and found:
                return int(found.group(1))
        if not page["items"] or page["next_after"] is None:
            break
        after = page["next_after"]
    raise AssertionError(f"attempt {attempt} of {job_id} logged no step")


def assert_resumed_from_checkpoint(fleet: Fleet, job_id: str, steps: int) -> None:
    """Attempt 2 began after attempt 1's checkpoint, and every loss point is there once."""
    events = fleet.events(job_id)
    resumed = next(e for e in events if e["attempt"] == 2 and e["to_state"] == "RUNNING")
    found = re.search(r"resumed at step (\d+)", resumed["message"])
    assert found, (resumed["message"], events)
    checkpointed = int(found.group(1))
    assert checkpointed >= 1
    assert first_step_of_attempt(fleet, job_id, 2) == checkpointed + 1
    assert loss_steps(fleet, job_id) == list(range(1, steps + 1))


def checkpointed_job(fleet: Fleet, cluster: SlurmCluster, steps: int) -> dict[str, Any]:
    """A job that checkpoints every 20 steps, retried once; returned once it passed 40."""
    job = fleet.submit(
        spec_on_slurm(
            cluster,
            stop={"max_steps": steps},
            log_every_steps=1,
            checkpoint={"every_steps": 20},
            retry={"max_restarts": 1},
        )
    )
    fleet.wait_until(
        lambda: fleet.job(job["id"])["progress"]["step"] >= 40,
        timeout=WAIT_S,
        what="a checkpoint of the first attempt",
    )
    return job


@pytest.mark.slow
def test_a_slurm_side_scancel_mid_run_retries_and_resumes_from_the_checkpoint(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    steps = 600
    job = checkpointed_job(fleet, slurm_cluster, steps)
    slurm_cluster.command("scancel", f"--name=ampfleet-{job['id']}-1")
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert done["attempt"] == 2
    reasons = {e["reason"] for e in fleet.events(job["id"]) if e["attempt"] == 1}
    assert reasons & {"slurm_signalled", "slurm_cancelled"}, reasons
    assert_resumed_from_checkpoint(fleet, job["id"], steps)
    assert len(slurm_jobs_of(slurm_cluster, job["id"])) == 2


@pytest.mark.slow
def test_a_node_marked_down_is_seen_with_the_reason_and_retried(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    node = slurm_cluster.node_names[-1]
    steps = 300
    job = checkpointed_job(fleet, slurm_cluster, steps)
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
    lost = [e for e in fleet.events(job["id"]) if e["reason"] in LOST_NODE]
    # Attempt 2 may have been placed on the node before Slurm was read again: it hears too.
    failed = next(e for e in lost if e["attempt"] == 1)
    # The node out of service, with Slurm's reason; then NODE_FAIL where the submit turned
    # Slurm's requeue off (22.05's v0.0.38 cannot: Slurm requeues the job instead, which
    # ampfleet cancels, naming the node and its reason).
    assert "test-node-down" in failed["message"]
    assert loss_steps(fleet, job["id"]) == list(range(1, steps + 1))


@pytest.mark.slow
def test_a_node_killed_outright_is_seen_retried_and_resumed_from_the_checkpoint(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    """A power failure of one node mid-run: its slurmd, its slurmstepds, the attempt's agent
    and rank there all killed at once (on the bed: everything of that host). Slurm notices
    after SlurmdTimeout; ampfleet stops placing on the node as soon as Slurm says it does
    not respond, says why, retries the attempt and resumes it from its checkpoint once the
    node is back."""
    if reason := slurm_cluster.need_nodes(2):
        pytest.skip(reason)
    node = slurm_cluster.node_names[-1]
    steps = 300
    job = checkpointed_job(fleet, slurm_cluster, steps)
    killed = slurm_cluster.kill_node(node)
    assert len(killed) >= 3  # slurmd, a slurmstepd, the agent (and its rank)
    try:
        fleet.wait_until(
            lambda: any(
                n["labels"]["slurm_node"] == node and n["state"] == "cordoned"
                for n in pool_nodes(fleet)
            ),
            timeout=WAIT_S,
            what="the silent node cordoned",
        )
        fleet.wait_until(
            lambda: given_up(fleet.job(job["id"])),
            timeout=WAIT_S,
            what="the attempt given up, to be retried once the node is back",
        )
    finally:
        slurm_cluster.start_node(node)  # the node comes back, as after a reboot
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=WAIT_S)
    assert done["attempt"] == 2
    lost = [e for e in fleet.events(job["id"]) if e["reason"] in LOST_NODE]
    assert lost, fleet.events(job["id"])
    assert lost[0]["attempt"] == 1
    assert node in lost[0]["message"]
    assert "not_responding" in lost[0]["message"]
    assert_resumed_from_checkpoint(fleet, job["id"], steps)


def given_up(job: dict[str, Any]) -> bool:
    """Attempt 1 is over: requeued, or its retry placed already."""
    return job["attempt"] >= 2 or job["state"] in {"QUEUED", "RESTARTING"}


@pytest.mark.slow
def test_slurms_time_limit_ends_the_attempt_timed_out(
    fleet: Fleet, slurm_cluster: SlurmCluster
) -> None:
    """An administrator cuts a running job's time limit to a minute: Slurm's TIMEOUT ends
    the attempt TIMED_OUT with Slurm's reason, not retried as a signal would be."""
    job = fleet.submit(spec_on_slurm(slurm_cluster, stop={"max_steps": 1_000_000}))
    fleet.wait_for_state(job["id"], {"RUNNING"}, timeout=WAIT_S)
    (line,) = slurm_jobs_of(slurm_cluster, job["id"])
    slurm_cluster.command("scontrol", "update", f"jobid={line.split()[0]}", "timelimit=1")
    done = fleet.wait_for_state(job["id"], {"TIMED_OUT"}, timeout=WAIT_S)
    assert done["attempt"] == 1
    ended = next(e for e in fleet.events(job["id"]) if e["to_state"] == "TIMED_OUT")
    assert ended["reason"] == "slurm_timeout"
    assert "time limit" in ended["message"]
    fleet.wait_until(
        lambda: "TIMEOUT" in " ".join(slurm_jobs_of(slurm_cluster, job["id"])),
        timeout=WAIT_S,
        what="Slurm's own end of the job: TIMEOUT",
    )
