"""GET /v1/jobs/{id}/diagnosis on a real run: a digits job whose fp32 AllReduce is not
hidden by its backward pass on 2 gloo ranks is told to halve its bytes, over HTTP and by
`ampfleet diagnose`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ampfleet.cli import app
from tests.support.factories import job_spec
from tests.support.fleet import FleetFactory

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_fp32_allreduce_of_a_digits_job_is_diagnosed(make_fleet: FleetFactory) -> None:
    fleet = make_fleet("postgres+redis")
    spec = job_spec(
        name="digits-diagnosis",
        stop={"max_steps": 60},
        log_every_steps=1,
        precision="fp32",
        allreduce_dtype="fp32",
    )
    job = fleet.submit(spec)
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})

    answer = fleet.http.get(f"/v1/jobs/{job['id']}/diagnosis")
    assert answer.status_code == 200, answer.text
    diagnosis = answer.json()
    assert diagnosis["breakdown"]["steps"] == 50  # the window: the latest 50 steps
    assert diagnosis["breakdown"]["to_step"] == 60
    assert set(diagnosis["breakdown"]["cpu_percent_by_rank"]) == {"0", "1"}
    findings = {f["rule"]: f for f in diagnosis["findings"]}
    assert "exposed_allreduce" in findings, diagnosis
    assert "allreduce_dtype to bf16" in findings["exposed_allreduce"]["advice"]

    missing = fleet.http.get("/v1/jobs/job_doesnotexist/diagnosis")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"

    told = CliRunner().invoke(
        app, ["diagnose", job["id"], "--url", fleet.base_url, "--key", fleet.admin_key]
    )
    assert told.exit_code == 0, told.output
    assert "[high] the ranks wait" in told.stdout or "[medium] the ranks wait" in told.stdout
    assert "allreduce_dtype to bf16" in told.stdout
