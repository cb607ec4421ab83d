"""The slurmrestd client against the harness's real slurmrestd, run here as the `slurm`
user, the way a site runs it (not root, and without SLURMRESTD_SECURITY=disable_user_check):
the schema it negotiates, submit, look-up by name, state, cancel, the nodes' capacity, and
the user the jobs run as. Then its JWT headers and a refused token, against a small server
of the test's own (22.05's controller has no JWT plugin)."""

from __future__ import annotations

import os
import pwd
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampfleet.scheduler.slurm.client import BatchJob, SlurmClient, SlurmError, SlurmJob
from ampfleet.scheduler.slurm.states import ACTIVE
from tests.support.rest_front import Reply, Seen, rest_front
from tests.support.slurm import PARTITION, SlurmCluster, cluster_for_tests, slurm_problem

WAIT_S = 120.0  # a bound on waiting for Slurm, never an assertion about speed


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """This module's cluster: slurmrestd as `slurm`."""
    problem = slurm_problem()
    if problem:
        pytest.skip(problem)
    with cluster_for_tests(rest_as_root=False) as cluster:
        yield cluster


@pytest.fixture
def client(slurm_cluster: SlurmCluster) -> Iterator[SlurmClient]:
    client = SlurmClient(f"unix:{slurm_cluster.socket_path}")
    yield client
    client.close()


def batch(name: str, script: str, *, nodes: int = 1, workdir: str = "/tmp") -> BatchJob:
    return BatchJob(
        name=name,
        script=f"#!/bin/bash\n{script}\n",
        nodes=nodes,
        tasks_per_node=1,
        cpus_per_task=1,
        environment={"PATH": "/usr/bin:/bin"},
        working_directory=workdir,
        time_limit_min=5,
        comment=f"test {name}",
        partition=PARTITION,
        standard_output="/dev/null",  # never a slurm-<id>.out left in /tmp
    )


def wait_for(client: SlurmClient, job_id: int, states: set[str]) -> SlurmJob:
    deadline = time.monotonic() + WAIT_S
    while True:
        job = client.job(job_id)
        if job is not None and job.state in states:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"Slurm job {job_id} never reached {states}: {job}")
        time.sleep(0.2)


def test_it_speaks_the_newest_version_the_server_offers(client: SlurmClient) -> None:
    offered = client.offered_versions()
    assert "v0.0.38" in offered  # 22.05's plugin
    assert client.version == offered[0]
    client.ping()


def test_a_job_submitted_is_found_by_name_runs_on_every_node_and_completes(
    client: SlurmClient, slurm_cluster: SlurmCluster, tmp_path: object
) -> None:
    nodes = len(slurm_cluster.node_names)
    job_id = client.submit(batch("amp-complete", "srun hostname", nodes=nodes))
    found = client.find("amp-complete")
    assert [j.job_id for j in found] == [job_id]
    assert found[0].comment == "test amp-complete"
    done = wait_for(client, job_id, {"COMPLETED", "FAILED"})
    assert done.state == "COMPLETED", done
    assert done.exit_code == 0


def test_jobs_run_as_the_user_slurmrestd_authenticates(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    """Local auth: the socket's peer is let in, and the jobs run as slurmrestd's own user
    (JWT: as the token's). That user is who needs ampfleet's node settings file."""
    slurm = pwd.getpwnam("slurm")
    folder = Path(tempfile.mkdtemp(prefix="amp-as-"))
    try:
        os.chown(folder, slurm.pw_uid, slurm.pw_gid)
        job_id = client.submit(batch("amp-whoami", f"id -un > {folder}/who", workdir=str(folder)))
        done = wait_for(client, job_id, {"COMPLETED", "FAILED"})
        assert done.state == "COMPLETED", done
        assert (folder / "who").read_text().strip() == "slurm"
        shown = slurm_cluster.command("scontrol", "show", "job", str(job_id))
        assert f"UserId=slurm({slurm.pw_uid})" in shown
    finally:
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


def test_a_failing_script_ends_failed(client: SlurmClient) -> None:
    job_id = client.submit(batch("amp-fail", "exit 3"))
    done = wait_for(client, job_id, {"COMPLETED", "FAILED"})
    assert done.state == "FAILED"


def test_cancel_ends_a_running_job_and_squeue_saw_it(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    job_id = client.submit(batch("amp-cancel", "sleep 300"))
    running = wait_for(client, job_id, {"RUNNING"})
    assert running.nodes
    assert "amp-cancel" in slurm_cluster.squeue_names()
    client.cancel(job_id)
    ended = wait_for(client, job_id, {"CANCELLED", "COMPLETED", "FAILED"})
    assert ended.state == "CANCELLED"
    assert "amp-cancel" not in slurm_cluster.squeue_names()
    client.cancel(job_id)  # cancelling what has ended is not an error


def test_a_job_slurm_cannot_fit_waits_with_slurms_reason(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    job_id = client.submit(batch("amp-too-big", "true", nodes=len(slurm_cluster.node_names) + 1))
    deadline = time.monotonic() + WAIT_S
    job = client.job(job_id)
    while job is not None and job.reason in ("", "None") and time.monotonic() < deadline:
        time.sleep(0.2)
        job = client.job(job_id)
    assert job is not None
    assert job.state == "PENDING"
    assert job.reason not in ("", "None"), job
    client.cancel(job_id)


def test_the_nodes_report_their_cpus_and_partition(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    nodes = {n.name: n for n in client.nodes()}
    assert set(nodes) == set(slurm_cluster.node_names)
    for node in nodes.values():
        assert node.cpus == slurm_cluster.cpus_per_node
        assert PARTITION in node.partitions
        assert node.state.split("+")[0] in {"idle", "mixed", "allocated"}


def test_the_states_of_jobs_that_have_not_ended_are_all_known_as_active(
    client: SlurmClient,
) -> None:
    for job in client.jobs():
        assert job.state in ACTIVE or job.state in {"COMPLETED", "FAILED", "CANCELLED"}


def test_every_call_carries_the_token_read_again_from_its_file_and_a_401_is_not_a_refusal(
    tmp_path: Path,
) -> None:
    """The token is read from its file for each call (an operator rotates it by replacing
    the file); slurmrestd answering 401 is ampfleet's credentials refused, which a later
    try may pass, never Slurm refusing the job."""
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")

    def expired_old(seen: Seen) -> Reply:
        if seen.headers.get("x-slurm-user-token") == "old-token":
            return Reply(401, {"errors": [{"error": "Authentication failure"}]})
        return Reply(200, {"jobs": [], "errors": []})

    with (
        tempfile.TemporaryDirectory(prefix="front-") as folder,
        rest_front(Path(folder) / "rest.socket") as front,
    ):
        front.policy = expired_old
        client = SlurmClient(front.url, user="ampfleet", token_file=token_file)
        client.use_version("v0.0.38")
        with pytest.raises(SlurmError) as refused:
            client.jobs()
        assert refused.value.refused is False
        assert "HTTP 401" in str(refused.value)
        assert "credentials" in str(refused.value)
        token_file.write_text("new-token\n")  # rotated
        assert client.jobs() == []
        client.close()
    first, second = front.seen
    assert first.headers["x-slurm-user-name"] == second.headers["x-slurm-user-name"] == "ampfleet"
    assert [first.headers["x-slurm-user-token"], second.headers["x-slurm-user-token"]] == [
        "old-token",
        "new-token",
    ]


def test_a_token_file_that_cannot_be_read_is_a_wait_not_a_refusal(tmp_path: Path) -> None:
    client = SlurmClient("unix:/nonexistent.socket", token_file=tmp_path / "missing")
    with pytest.raises(SlurmError) as unreadable:
        client.auth_headers()
    assert unreadable.value.refused is False
    assert "token file" in str(unreadable.value)
