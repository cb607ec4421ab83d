"""Profiles on demand on a real fleet: a running digits job on 2 gloo ranks captures steps
with torch.profiler on both, its traces and summary are listed and downloaded as artifacts
(over HTTP and by `ampfleet profile`); a second request while one is in progress, a read
key, bad bodies and a job that is no longer RUNNING are refused in the error envelope."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ampfleet.cli import app
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, FleetFactory

pytestmark = pytest.mark.e2e


def _refused(answer: Any, status: int) -> str:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"code", "message", "details"}
    return str(error["message"])


def _profile_when_final(fleet: Fleet, job_id: str, profile_id: str) -> dict[str, Any]:
    url = f"/v1/jobs/{job_id}/profiles/{profile_id}"
    fleet.wait_until(
        lambda: fleet.http.get(url).json()["state"] in {"done", "failed", "cancelled"},
        timeout=120,
        what=f"profile {profile_id} to end",
    )
    return dict(fleet.http.get(url).json())


def _trace_operators(raw: bytes) -> set[str]:
    return {str(event.get("name")) for event in json.loads(raw)["traceEvents"]}


def test_a_running_job_is_profiled_on_both_ranks(make_fleet: FleetFactory, tmp_path: Path) -> None:
    fleet = make_fleet("postgres+redis")
    spec = job_spec(
        name="digits-profiled",
        stop={"max_steps": 1_000_000},  # RUNNING until the test cancels it
        precision="fp32",
        allreduce_dtype="bf16",
    )
    job_id = fleet.submit(spec)["id"]
    fleet.wait_for_state(job_id, {"RUNNING"})
    path = f"/v1/jobs/{job_id}/profile"

    asked = fleet.http.post(path, json={"steps": 3})
    assert asked.status_code == 202, asked.text
    profile_id = asked.json()["id"]
    assert asked.json()["state"] == "requested"
    assert profile_id in _refused(fleet.http.post(path, json={"steps": 3}), 409)
    reader = fleet.http.post("/v1/keys", json={"role": "read", "name": "reader"}).json()["key"]
    as_reader = {"Authorization": f"Bearer {reader}"}
    assert "read-only" in _refused(fleet.http.post(path, json={}, headers=as_reader), 403)
    for body in ({"steps": 0}, {"steps": 21}, {"ranks": [2]}, {"ranks": [0, 0]}, {"x": 1}):
        _refused(fleet.http.post(path, json=body), 422)

    profile = _profile_when_final(fleet, job_id, profile_id)
    assert profile["state"] == "done", profile
    assert profile["end_step"] - profile["start_step"] == 2
    names = sorted(a["name"] for a in profile["artifacts"])
    prefix = f"profiles/{profile_id}/"
    assert names == [
        f"{prefix}rank-0.trace.json",
        f"{prefix}rank-1.trace.json",
        f"{prefix}summary.json",
    ]
    listed = {a["name"]: a for a in fleet.http.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]}
    assert all(listed[name]["kind"] == "profile" for name in names)
    for rank in (0, 1):
        raw = fleet.http.get(f"/v1/jobs/{job_id}/artifacts/{prefix}rank-{rank}.trace.json")
        assert raw.status_code == 200, raw.text
        operators = _trace_operators(raw.content)
        assert {"aten::addmm", "aten::mm"} & operators
        assert f"ampfleet:step {profile['start_step']}" in operators
    summary = fleet.http.get(f"/v1/jobs/{job_id}/artifacts/{prefix}summary.json").json()
    assert summary == profile["summary"]
    assert set(summary["ranks"]) == {"0", "1"}
    for figures in summary["ranks"].values():
        assert 0 < figures["phases"]["backward_share"] < 1
        assert figures["overlap"]["communication_s"] > 0
        assert figures["top_operators"]
    assert any(
        e["reason"] == "profile" and profile_id in e["message"] for e in fleet.events(job_id)
    )
    # Read keys read profiles, as they read every artifact.
    latest = fleet.http.get(path, headers=as_reader)
    assert latest.json()["id"] == profile_id

    url = ["--url", fleet.base_url, "--key", fleet.admin_key]
    told = CliRunner(env={"COLUMNS": "200"}).invoke(
        app,
        ["profile", job_id, "--steps", "2", "--ranks", "1", "-o", str(tmp_path / "out"), *url],
    )
    assert told.exit_code == 0, told.output
    (second,) = (tmp_path / "out" / "profiles").iterdir()
    assert sorted(p.name for p in second.iterdir()) == ["rank-1.trace.json", "summary.json"]
    assert {"aten::addmm", "aten::mm"} & _trace_operators(
        (second / "rank-1.trace.json").read_bytes()
    )
    assert "rank 1: data" in told.stdout
    assert "top operators by self CPU time, rank 1" in told.stdout
    assert "ui.perfetto.dev" in told.stdout

    # Requested, then the job is cancelled: the profile goes with it, and no more may come.
    third = fleet.http.post(path, json={"steps": 20}).json()["id"]
    fleet.http.post(f"/v1/jobs/{job_id}/cancel")
    assert _profile_when_final(fleet, job_id, third)["state"] == "cancelled"
    fleet.wait_for_state(job_id, {"CANCELLED"})
    assert "CANCELLED" in _refused(fleet.http.post(path, json={}), 409)
