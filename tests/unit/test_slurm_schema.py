"""The Slurm backend's pure parts: the state mapping, and the v0.0.40+ schema the harness's
22.05 server does not offer (its v0.0.38 is exercised for real in tests/slurm)."""

from __future__ import annotations

import pytest

from ampfleet.scheduler.slurm.client import BatchJob, SlurmClient, _node
from ampfleet.scheduler.slurm.states import Next, meaning


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("PENDING", Next.WAIT),
        ("RUNNING", Next.WAIT),
        ("COMPLETING", Next.WAIT),
        ("COMPLETED", Next.ENDED),
        ("FAILED", Next.RETRY),
        ("NODE_FAIL", Next.RETRY),
        ("PREEMPTED", Next.RETRY),
        ("OUT_OF_MEMORY", Next.FAILED),
        ("BOOT_FAIL", Next.RETRY),
        ("TIMEOUT", Next.TIMED_OUT),
        ("CANCELLED", Next.CANCELLED),
        ("SOMETHING_NEW", Next.RETRY),
    ],
)
def test_each_slurm_state_has_a_next_step(state: str, expected: Next) -> None:
    found = meaning(state, 7, "NodeDown")
    assert found.next is expected
    if expected is not Next.WAIT:
        assert "Slurm job 7" in found.message
        assert found.reason.startswith("slurm_")


def job() -> BatchJob:
    return BatchJob(
        name="ampfleet-J-1",
        script="#!/bin/sh\ntrue\n",
        nodes=2,
        tasks_per_node=1,
        cpus_per_task=2,
        environment={"A": "1"},
        working_directory="/w",
        time_limit_min=10,
        partition="p",
    )


def test_the_v0_0_40_body_carries_the_script_inside_the_job_and_numbers_as_objects() -> None:
    client = SlurmClient("http://127.0.0.1:9")
    client.use_version("v0.0.40")
    body = client._submit_body(job())
    assert set(body) == {"job"}
    props = body["job"]
    assert props["script"].startswith("#!/bin/sh")
    assert props["environment"] == ["A=1"]
    assert props["time_limit"] == {"set": True, "infinite": False, "number": 10}
    assert (props["minimum_nodes"], props["maximum_nodes"], props["tasks"]) == (2, 2, 2)
    assert props["requeue"] is False


def test_the_v0_0_38_body_has_the_script_beside_the_job() -> None:
    client = SlurmClient("http://127.0.0.1:9")
    client.use_version("v0.0.38")
    body = client._submit_body(job())
    assert body["script"].startswith("#!/bin/sh")
    assert body["job"]["environment"] == {"A": "1"}
    assert body["job"]["nodes"] == "2"
    assert body["job"]["time_limit"] == 10


def test_a_v0_0_40_job_and_node_read_like_a_v0_0_38_one() -> None:
    client = SlurmClient("http://127.0.0.1:9")
    client.use_version("v0.0.40")
    read = client._job(
        {
            "job_id": 3,
            "name": "n",
            "job_state": ["NODE_FAIL", "REQUEUED"],
            "state_reason": "NodeDown",
            "nodes": "node1",
            "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": 9}},
        }
    )
    assert (read.state, read.exit_code, read.reason) == ("NODE_FAIL", 9, "NodeDown")
    node = _node(
        {
            "name": "gpu1",
            "state": ["IDLE", "DRAIN"],
            "cpus": 64,
            "alloc_cpus": 0,
            "gres": "gpu:a100:4(S:0-1)",
            "real_memory": 512000,
            "partitions": ["gpu"],
        }
    )
    assert (node.state, node.gpus, node.cpus) == ("idle+drain", 4, 64)


def test_a_backends_node_hosts_only_jobs_that_name_its_pool() -> None:
    from ampfleet.core.backends import matches_backend

    slurm = {"backend": "slurm", "pool": "hpc"}
    assert matches_backend({}, {})
    assert matches_backend({"pool": "gpu"}, {})  # an ampfleet node with a pool label
    assert not matches_backend(slurm, {})
    assert not matches_backend(slurm, {"pool": "other"})
    assert matches_backend(slurm, {"pool": "hpc"})


def test_job_names_read_back_as_job_and_attempt() -> None:
    from ampfleet.scheduler.slurm.names import parse_job_name, slurm_job_name

    name = slurm_job_name("job_01jabc-x", 3)
    assert parse_job_name(name) == ("job_01jabc-x", 3)
    assert parse_job_name("someone-elses-job") is None
    assert parse_job_name("ampfleet-job_1-") is None


@pytest.mark.parametrize(
    ("slurm_says", "time_limit"),
    [
        ("JobState=COMPLETING Reason=TimeLimit", True),  # 22.05, as its steps are signalled
        ("JobState=TIMEOUT Reason=TimeLimit", True),
        ("JobState=DEADLINE Reason=DeadLine", True),
        ("JobState=CANCELLED Reason=None", False),
        ("JobState=COMPLETING Reason=None", False),
        ("JobState=PREEMPTED Reason=None", False),
        (None, False),
    ],
)
def test_an_agent_tells_slurms_time_limit_from_other_signals(
    slurm_says: str | None, time_limit: bool
) -> None:
    from ampfleet.workers.one_attempt import _time_limit

    assert _time_limit(slurm_says) is time_limit
