"""A sweep survives its scheduler and a worker being killed mid-trial: the controller's study
is rebuilt from the database by the scheduler started after it, the killed trial's job
restarts from its checkpoint on another node as any job does, and no trial is lost or run
twice."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import placed_on

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TRIALS = 3


@pytest.mark.timeout(1500)  # minutes of training on a small machine, a restart among them
@pytest.mark.parametrize("configuration", ["embedded", "postgres+redis"])
def test_a_sweep_finishes_after_its_scheduler_and_a_worker_are_killed(
    make_fleet, configuration: str
) -> None:
    fleet = make_fleet(
        configuration, nodes=("node-a", "node-b"), extra_env={"AMPFLEET_NODE_TIMEOUT_S": "4"}
    )
    spec = {
        "base": job_spec(
            resources={"procs_per_node": 1},
            precision="fp32",
            allreduce_dtype="fp32",
            stop={"max_steps": 600},
            checkpoint={"every_steps": 100},
            log_every_steps=50,
        ),
        "space": {"learning_rate": {"type": "log_uniform", "low": 1e-3, "high": 1e-2}},
        "objectives": [{"metric": "loss", "direction": "minimize"}],
        "sampler": {"type": "random", "seed": 7},
        "budget": {"max_trials": TRIALS, "max_concurrent": 2},
    }
    response = fleet.http.post("/v1/sweeps", json=spec)
    assert response.status_code == 202, response.text
    sweep_id = response.json()["id"]

    def a_trial_past_a_checkpoint() -> str | None:
        for trial in fleet.http.get(f"/v1/sweeps/{sweep_id}").json()["trials"]:
            job = fleet.job(trial["job_id"])
            if job["state"] == "RUNNING" and job["progress"]["step"] >= 200:
                return str(job["id"])
        return None

    fleet.wait_until(a_trial_past_a_checkpoint, timeout=180, what="a trial past a checkpoint")
    victim_job = a_trial_past_a_checkpoint()
    assert victim_job is not None
    [victim] = placed_on(fleet, victim_job, 1)
    fleet.kill("scheduler", signal.SIGKILL)
    fleet.kill(f"worker-{victim}", signal.SIGKILL)
    fleet.start_scheduler("scheduler-restarted")

    def ended() -> bool:
        return fleet.http.get(f"/v1/sweeps/{sweep_id}").json()["state"] != "RUNNING"

    fleet.wait_until(ended, timeout=600, what="the sweep to end")
    sweep = fleet.http.get(f"/v1/sweeps/{sweep_id}").json()
    assert sweep["state"] == "SUCCEEDED", sweep["reason"]
    assert [t["number"] for t in sweep["trials"]] == list(range(TRIALS))
    assert {t["state"] for t in sweep["trials"]} == {"complete"}, sweep["trials"]
    jobs = fleet.http.get("/v1/jobs", params={"limit": 50}).json()["items"]
    trials = Counter(j["labels"]["trial"] for j in jobs if j["labels"].get("sweep") == sweep_id)
    assert trials == Counter(str(n) for n in range(TRIALS))  # each trial ran as one job
    restarted = fleet.job(victim_job)
    assert restarted["state"] == "SUCCEEDED"
    assert restarted["attempt"] == 2
