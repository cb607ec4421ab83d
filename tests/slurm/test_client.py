"""The slurmrestd client against the harness's real slurmrestd: the schema it negotiates,
submit, look-up by name, state, cancel and the nodes' capacity."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ampfleet.scheduler.slurm.client import BatchJob, SlurmClient, SlurmJob
from ampfleet.scheduler.slurm.states import ACTIVE
from tests.support.slurm import PARTITION, SlurmCluster

WAIT_S = 120.0  # a bound on waiting for Slurm, never an assertion about speed


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
