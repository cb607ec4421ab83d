"""Script mode end to end, with real processes in the bubblewrap sandbox: a plain torchrun
DDP script that knows nothing of ampfleet, submitted from a shell with `ampfleet submit
job.yaml --code DIR -- python train.py --epochs 2`, runs unchanged on 2 ranks to SUCCEEDED
with its printed lines in the logs and its state_dict downloadable and loadable; a failing
script (submitted with the SDK) ends FAILED with its message; a cancelled one CANCELLED, its
processes gone. One fleet per configuration for the module."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.sdk import Client
from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet, fleet_cli, running_fleet
from tests.support.scripts import DDP_TRAIN, FAILING, LONG_RUNNING

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
]


@pytest.fixture(scope="module", params=FLEET_CONFIGURATIONS)
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp(f"fleet-{request.param.replace('+', '-')}")
    with running_fleet(root, request.param, cpu_slots=2) as started:
        yield started


def script_processes(job_id: str) -> list[int]:
    """Pids whose environment names the job: its scripts (torchrun's ranks name it too)."""
    needle = f"AMPFLEET_JOB_ID={job_id}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and needle in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.both_configurations
def test_a_plain_ddp_script_runs_unchanged_on_two_ranks(fleet: Fleet, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_bytes(DDP_TRAIN)
    (project / "job.yaml").write_text(yaml.safe_dump({"resources": {"procs_per_node": 2}}))
    submitted = fleet_cli(
        fleet,
        *("submit", "job.yaml", "--code", ".", "--follow"),
        *("--", "python", "train.py", "--epochs", "2"),
        cwd=project,
    )
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output + fleet.logs()
    job_id = re.search(r"submitted (job_\w+)", output).group(1)
    job = fleet.job(job_id)
    assert job["state"] == "SUCCEEDED"
    assert job["spec"]["code"]["command"] == ["python", "train.py", "--epochs", "2"]
    assert (job["progress"]["step"], job["progress"]["total_steps"]) == (16, 16)
    assert "loss" in job["latest_metrics"]
    started = [e for e in fleet.events(job_id) if e["to_state"] == "RUNNING"]
    assert started[0]["message"] == "2 ranks running the job's command"

    logs = fleet.http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0}).json()["items"]
    lines = [entry["line"] for entry in logs]
    assert "hello from the plain script, world of 2" in lines
    assert any(line.startswith("epoch 1 step 16/16 loss") for line in lines)

    artifacts = fleet.http.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
    urls = {a["name"]: a["download_url"] for a in artifacts}
    weights = fleet.http.get(urls["outputs/model.pt"])
    assert weights.status_code == 200
    state = torch.load(io.BytesIO(weights.content), weights_only=True)
    assert state["weight"].shape == (1, 8)
    manifest = json.loads(fleet.http.get(urls["manifest.json"]).content)
    assert manifest["command"] == ["python", "train.py", "--epochs", "2"]
    assert manifest["bundle"]["sha256"] == job["spec"]["code"]["sha256"]


def test_a_failing_script_fails_with_its_message_and_a_cancelled_one_stops(
    fleet: Fleet, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "fail.py").write_bytes(FAILING)
    (project / "count.py").write_bytes(LONG_RUNNING)
    with Client(fleet.base_url, fleet.admin_key) as client:
        bundle = client.upload_bundle(project)
        failing = client.submit(command=["python", "fail.py"], code=bundle.id)
        counting = client.submit(command=["python", "count.py"], code=bundle.id)

    failed = fleet.wait_for_state(failing.id, {"FAILED"})
    assert "exited with status 3" in failed["failure_reason"]
    assert "the learning rate is not a number" in failed["failure_reason"]

    fleet.wait_for_state(counting.id, {"RUNNING"})
    fleet.wait_until(
        lambda: fleet.job(counting.id)["progress"]["step"] >= 3, timeout=120, what="counting"
    )
    assert script_processes(counting.id)
    assert fleet.http.post(f"/v1/jobs/{counting.id}/cancel").status_code in (200, 202)
    fleet.wait_for_state(counting.id, {"CANCELLED"})
    fleet.wait_until(
        lambda: not script_processes(counting.id), timeout=60, what="the script to be gone"
    )
