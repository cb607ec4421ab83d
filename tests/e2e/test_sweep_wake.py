"""A trial is pruned when its rung's point lands, not at the scheduler's next poll: the node
agent wakes the sweep controller once it stored a point the trial's pruner reads."""

from __future__ import annotations

import pytest

from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet, FleetFactory
from tests.support.fleet_sweeps import DEFAULT_LR, EVAL_EVERY, base, wait_for_sweep

pytestmark = pytest.mark.e2e

STEPS = 300


@pytest.fixture(params=FLEET_CONFIGURATIONS)
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    """A fleet whose scheduler polls once an hour: a pass runs only when woken."""
    return make_fleet(request.param, extra_env={"AMPFLEET_SCHEDULER_POLL_S": "3600"})


def test_a_trial_is_pruned_at_its_rung_without_waiting_for_a_poll(fleet: Fleet) -> None:
    # One trial at a time: while trial 1 runs, no other trial's end wakes the scheduler,
    # so only the wake of its rung's point can prune it before its last step.
    # Trial 0 is small and learns; trial 1 is large (its steps slow) and barely learns, so
    # that it is still far from its last step when its first rung's point lands.
    spec = {
        "base": base(stop={"max_steps": STEPS}),
        "space": {
            "learning_rate": {"type": "log_uniform", "low": 1e-6, "high": 1e-2},
            "hidden": {"type": "int", "low": 32, "high": 2048, "log": True},
        },
        "start_with": [
            {"learning_rate": DEFAULT_LR, "hidden": 32},
            {"learning_rate": 1e-6, "hidden": 2048},
        ],
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "pruner": {"type": "asha", "min_resource": EVAL_EVERY, "reduction_factor": 2},
        "budget": {"max_trials": 2, "max_concurrent": 1},
    }
    response = fleet.http.post("/v1/sweeps", json=spec)
    assert response.status_code == 202, response.text
    sweep = wait_for_sweep(fleet, response.json()["id"])

    first, second = sweep["trials"]
    assert first["state"] == "complete", first
    assert second["state"] == "pruned", second
    assert second["reason"].startswith("asha: val_accuracy"), second["reason"]
    job = fleet.wait_for_state(second["job_id"], {"CANCELLED"}, timeout=120)
    assert job["progress"]["step"] < STEPS
