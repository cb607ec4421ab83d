"""Ranks that finished are shutting down, not hung: a job on a short hang timeout whose
ranks take longer than that to exit after writing `finished` (a long garbage collection on a
loaded node, here user code that sleeps at exit) ends SUCCEEDED on its first attempt, with
its model listed, and its node is not cordoned. (Long tier: real processes.)"""

from __future__ import annotations

import pytest

from tests.support.archives import zip_of
from tests.support.factories import job_spec
from tests.support.fleet import FleetFactory, transitions

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

HANG_TIMEOUT_S = 10
SLEEP_AT_EXIT_S = 3 * HANG_TIMEOUT_S
"""Longer than the hang timeout, shorter than the exit grace (the start timeout, 120 s)."""

RECIPE = f"""
import atexit
import time

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count


def _linger():
    time.sleep({SLEEP_AT_EXIT_S})
    print("lingered {SLEEP_AT_EXIT_S}s after the run", flush=True)


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    atexit.register(_linger)  # after `finished`: the interpreter exits when the run is over
    return digits(hp, ctx)


recipe = RecipeDefinition(
    name="lingering-digits",
    description="digits, whose ranks take their time to exit",
    hyperparameters=DigitsHyperparameters,
    build_path="lingering.recipe:build",
    parameter_count=parameter_count,
)
""".encode()


def test_ranks_slow_to_exit_after_finished_are_not_hung(make_fleet: FleetFactory) -> None:
    fleet = make_fleet(extra_env={"AMPFLEET_SANDBOX": "none", "AMPFLEET_CORDON_AFTER_HANGS": "1"})
    body = zip_of({"lingering/__init__.py": b"", "lingering/recipe.py": RECIPE})
    uploaded = fleet.http.post("/v1/bundles", content=body)
    assert uploaded.status_code == 201, uploaded.text
    spec = job_spec(
        code={"bundle": uploaded.json()["id"], "entrypoint": "lingering.recipe:recipe"},
        monitoring={"hang_timeout_s": HANG_TIMEOUT_S},
        retry={"max_restarts": 2},
    )
    del spec["recipe"]
    job = fleet.submit(spec)

    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
    history = transitions(fleet, job["id"])
    assert done["attempt"] == 1, history
    assert not any(to in ("RESTARTING", "QUEUED") for _, to, _ in history[1:]), history
    events = fleet.events(job["id"])
    assert not [e for e in events if e["reason"] in ("hung", "node_cordoned")], events
    assert history[-1] == ("RUNNING", "SUCCEEDED", "completed")
    # The ranks did outlive the hang timeout after `finished`, and exited on their own.
    logs = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"rank": 0, "limit": 1000})
    lines = [item["line"] for item in logs.json()["items"]]
    assert f"lingered {SLEEP_AT_EXIT_S}s after the run" in lines, lines[-20:]

    artifacts = fleet.http.get(f"/v1/jobs/{job['id']}/artifacts").json()["items"]
    assert "model.safetensors" in {a["name"] for a in artifacts}
    [node] = fleet.http.get("/v1/nodes").json()["items"]
    assert node["state"] != "cordoned", node
