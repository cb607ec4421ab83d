"""Where a job's start goes, launch to first step, published as an event of the job."""

from __future__ import annotations

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import FleetFactory, start_phases

pytestmark = pytest.mark.e2e

PHASE_NAMES = ("launch", "interpreter", "imports", "rendezvous", "model build", "first step")


def test_every_phase_of_a_start_is_an_event_of_the_job(make_fleet: FleetFactory) -> None:
    # Cold (a warm start's is test_warm_start's): every phase takes time of its own.
    fleet = make_fleet("embedded", extra_env={"AMPFLEET_RANK_LAUNCHER": "local"})
    job = fleet.submit(job_spec(stop={"max_steps": 3}))
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    (phases,) = start_phases(fleet, job["id"])
    assert tuple(phases) == PHASE_NAMES
    assert all(seconds >= 0 for seconds in phases.values())
    # The ranks import torch; the launcher is an interpreter of its own.
    assert phases["imports"] > 0
    assert phases["launch"] > 0
