"""Where a job's start goes, launch to first step, published as an event of the job."""

from __future__ import annotations

import re

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import Fleet

pytestmark = pytest.mark.e2e

PHASE_NAMES = ("launch", "interpreter", "imports", "rendezvous", "model build", "first step")


def start_phases(fleet: Fleet, job_id: str) -> list[dict[str, float]]:
    """Each start_phases event of the job, as seconds per phase (from its message)."""
    found = []
    for event in fleet.events(job_id):
        if event["reason"] == "start_phases":
            pairs = re.findall(r"([a-z][a-z ]*?) (\d+\.\d+) s", event["message"].split(": ")[1])
            found.append({name: float(seconds) for name, seconds in pairs})
    return found


def test_every_phase_of_a_start_is_an_event_of_the_job(fleet: Fleet) -> None:
    job = fleet.submit(job_spec(stop={"max_steps": 3}))
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    (phases,) = start_phases(fleet, job["id"])
    assert tuple(phases) == PHASE_NAMES
    assert all(seconds >= 0 for seconds in phases.values())
    # The ranks' imports (torch) and the launch (the launcher's own) take time on any node.
    assert phases["imports"] > 0
    assert phases["launch"] > 0
