"""A project's idle policy on a real fleet: a job whose ranks sleep instead of computing is
told it idles, with the figures, and stopped when the project asks; a job of a project
without a policy is left alone, and its node's heartbeat carries its ranks to /metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.fleet import FleetFactory
from tests.support.probe_recipe import install_probe

pytestmark = pytest.mark.e2e
NODE_RANKS = re.compile(r"^ampfleet_node_ranks\{[^}]*\} (\S+)$", re.MULTILINE)


def _node_ranks(exposition: str) -> float:
    return sum(float(value) for value in NODE_RANKS.findall(exposition))


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_a_job_that_idles_is_told_and_stopped(make_fleet: FleetFactory, tmp_path: Path) -> None:
    fleet = make_fleet(
        extra_env={
            "PYTHONPATH": install_probe(tmp_path / "probe-site"),
            "AMPFLEET_TELEMETRY_INTERVAL_S": "1",
        },
    )
    policy = {"idle_policy": {"below_percent": 50, "window_s": 10, "action": "stop"}}
    answered = fleet.http.put("/v1/projects/default", json=policy)
    assert answered.status_code == 200, answered.text
    assert answered.json()["idle_policy"] == policy["idle_policy"]
    sleeper = {
        "recipe": "probe",
        "hyperparameters": {"sleep_per_step_s": 0.5},
        "stop": {"max_steps": 100_000},
    }
    job = fleet.submit(sleeper)
    done = fleet.wait_for_state(job["id"], {"CANCELLED"}, timeout=240)
    assert done["progress"]["step"] > 0  # it ran, slowly, before it was stopped
    events = fleet.events(job["id"])
    [idle] = [e for e in events if e["reason"] == "idle"]
    assert "under 50% for 10s on end" in idle["message"]
    assert "the project's idle policy stops it" in idle["message"]
    assert ("CANCELLING", "idle_policy") in [(e["to_state"], e["reason"]) for e in events]

    # Without a policy the same job runs on: it is cancelled by hand, never by the watch.
    fleet.http.put("/v1/projects/default", json={})
    calm = fleet.submit({**sleeper, "stop": {"max_steps": 40}})
    # Its node's heartbeat carries what its ranks use: /metrics has it per node.
    fleet.wait_until(
        lambda: _node_ranks(fleet.http.get("/metrics").text) >= 1,
        timeout=120,
        what="the node's rank count on /metrics",
    )
    fleet.wait_for_state(calm["id"], {"SUCCEEDED"}, timeout=240)
    assert [e for e in fleet.events(calm["id"]) if e["reason"] == "idle"] == []
