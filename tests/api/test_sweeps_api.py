"""The sweeps resource over HTTP, with the controller's pass run in the test (real database,
no fleet): validation in the one envelope, project scoping, quotas, the concurrency and the
trial budget the controller keeps, and cancel."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from ampfleet.core.states import JobState
from tests.support.factories import job_spec
from tests.support.sweeps import controller_pass, end_jobs, sweep_spec, trial_jobs


def test_a_sweep_starts_trials_up_to_its_concurrency_and_budget(client: TestClient) -> None:
    response = client.post("/v1/sweeps", json=sweep_spec())
    assert response.status_code == 202, response.text
    sweep = response.json()
    assert sweep["state"] == "RUNNING"
    assert sweep["trials"] == []
    controller_pass()
    controller_pass()  # a second pass asks for nothing more while two run
    jobs = trial_jobs(sweep["id"])
    assert [j.trial for j in jobs] == [0, 1]
    for job in jobs:
        assert job.state == JobState.QUEUED
        assert job.resolved["labels"] == {"sweep": sweep["id"], "trial": str(job.trial)}
        assert job.resolved["precision"] in {"bf16", "fp32"}
        assert 1e-4 <= job.resolved["hyperparameters"]["learning_rate"] <= 1e-1
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert [t["state"] for t in body["trials"]] == ["running", "running"]
    assert body["trials"][0]["params"] != body["trials"][1]["params"]

    for _ in range(5):  # end what runs, let the controller follow, until the budget is spent
        end_jobs([j.id for j in trial_jobs(sweep["id"]) if j.state == JobState.QUEUED])
        controller_pass()
    jobs = trial_jobs(sweep["id"])
    assert [j.trial for j in jobs] == [0, 1, 2, 3, 4]  # the budget, each trial once
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert body["state"] == "FAILED"
    assert body["reason"] == "its trial budget spent; no trial completed"
    assert {t["state"] for t in body["trials"]} == {"failed"}
    assert "ended by the test" in body["trials"][0]["reason"]


def test_cancel_cancels_its_trials_and_asks_for_no_more(client: TestClient) -> None:
    sweep = client.post("/v1/sweeps", json=sweep_spec()).json()
    controller_pass()
    response = client.post(f"/v1/sweeps/{sweep['id']}/cancel")
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "CANCELLED"
    controller_pass()
    jobs = trial_jobs(sweep["id"])
    assert len(jobs) == 2
    assert {j.state for j in jobs} == {JobState.CANCELLED}
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert {t["state"] for t in body["trials"]} == {"cancelled"}
    again = client.post(f"/v1/sweeps/{sweep['id']}/cancel")
    assert again.status_code == 409
    assert again.json()["error"]["message"] == f"sweep {sweep['id']} is already CANCELLED"


def test_another_projects_sweep_does_not_exist(app, make_key) -> None:
    alpha = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    beta = TestClient(app, headers={"Authorization": f"Bearer {make_key('beta', 'write')}"})
    sweep = alpha.post("/v1/sweeps", json=sweep_spec()).json()
    assert sweep["project"] == "alpha"
    for response in (
        beta.get(f"/v1/sweeps/{sweep['id']}"),
        beta.post(f"/v1/sweeps/{sweep['id']}/cancel"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert beta.get("/v1/sweeps").json()["items"] == []
    assert [s["id"] for s in alpha.get("/v1/sweeps").json()["items"]] == [sweep["id"]]
    refused = beta.post("/v1/sweeps", json=sweep_spec(project="alpha"))
    assert refused.status_code == 403


def test_a_read_key_cannot_start_or_cancel_a_sweep(app, make_key, client: TestClient) -> None:
    reader = TestClient(app, headers={"Authorization": f"Bearer {make_key('default', 'read')}"})
    assert reader.post("/v1/sweeps", json=sweep_spec()).status_code == 403
    sweep = client.post("/v1/sweeps", json=sweep_spec()).json()
    assert reader.post(f"/v1/sweeps/{sweep['id']}/cancel").status_code == 403
    assert reader.get(f"/v1/sweeps/{sweep['id']}").status_code == 200


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"space": {}}, "space", "at least 1"),
        ({"space": {"lr": {"type": "log_uniform", "low": 0, "high": 1}}}, "space.lr", ""),
        ({"space": {"lr": {"type": "uniform", "low": 2, "high": 1}}}, "space.lr", "below"),
        ({"space": {"lr": {"type": "gaussian"}}}, "space.lr", ""),
        ({"space": {"resources.nodes": {"type": "int", "low": 1, "high": 2}}}, None, "platform"),
        ({"objectives": []}, "objectives", ""),
        ({"budget": {"max_trials": 0}}, "budget.max_trials", ""),
        ({"budget": {"max_trials": 5, "max_concurrent": 0}}, "budget.max_concurrent", ""),
        ({"sampler": {"type": "annealing"}}, "sampler.type", ""),
        ({"pruner": {"type": "bandit"}}, "pruner.type", ""),
        (
            {
                "objectives": [
                    {"metric": "val_accuracy", "direction": "maximize"},
                    {"metric": "samples_per_s", "direction": "maximize"},
                ]
            },
            None,
            "several objectives",
        ),
        ({"sampler": {"type": "grid"}}, None, "grid search needs choices"),
    ],
)
def test_bad_sweeps_are_422_in_the_envelope(
    client: TestClient, overrides: dict[str, Any], field: str | None, words: str
) -> None:
    response = client.post("/v1/sweeps", json=sweep_spec(**overrides))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    if field is not None:
        assert any((d["field"] or "").startswith(field) for d in error["details"]), error
    assert words in error["message"] or any(words in d["message"] for d in error["details"])
    assert client.get("/v1/sweeps").json()["items"] == []


def test_a_space_whose_trials_cannot_be_jobs_is_refused(client: TestClient) -> None:
    space = {"precision": {"type": "categorical", "choices": ["bf16", "fp64"]}}
    response = client.post("/v1/sweeps", json=sweep_spec(space=space))
    assert response.status_code == 422, response.text
    assert "precision=fp64 is no valid job" in response.json()["error"]["message"]
    space = {"hidden": {"type": "int", "low": 8, "high": 100_000}}
    response = client.post("/v1/sweeps", json=sweep_spec(space=space))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "hyperparameters.hidden"


def test_quotas_refuse_a_sweep_with_the_reason(client: TestClient) -> None:
    put = client.put("/v1/projects/default", json={"max_running_jobs": 1})
    assert put.status_code == 200, put.text
    response = client.post("/v1/sweeps", json=sweep_spec())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == (
        "budget.max_concurrent: 2 concurrent trials, but project default may run 1 jobs at once"
    )
    client.put("/v1/projects/default", json={"max_running_jobs": None, "max_queued_jobs": 1})
    client.post("/v1/jobs", json=job_spec())
    response = client.post("/v1/sweeps", json=sweep_spec())
    assert response.status_code == 429, response.text
    assert "has 1 queued jobs, its limit is 1" in response.json()["error"]["message"]


def test_trials_wait_for_room_in_the_projects_queue(client: TestClient) -> None:
    client.put("/v1/projects/default", json={"max_queued_jobs": 1})
    sweep = client.post("/v1/sweeps", json=sweep_spec()).json()
    controller_pass()
    assert [j.trial for j in trial_jobs(sweep["id"])] == [0]  # the second would be over quota
    end_jobs([j.id for j in trial_jobs(sweep["id"])])
    controller_pass()
    assert [j.trial for j in trial_jobs(sweep["id"])] == [0, 1]
    assert client.get(f"/v1/sweeps/{sweep['id']}").json()["state"] == "RUNNING"
