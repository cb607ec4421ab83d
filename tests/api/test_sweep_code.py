"""A sweep over a user's own code: a script bundle as the base (`code.command`), checked at
submit as a job's would be (its project may run custom code, the script is in the bundle),
each trial's job running the bundle's bytes with the trial's hyperparameters; a project that
stopped allowing custom code ends the sweep at its next trial. And the recipe's own checks of
the inputs, at submit and for each trial."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from ampfleet.core.db import session_scope
from ampfleet.core.models import Project, Sweep
from tests.support.archives import allow_custom_code, zip_of
from tests.support.datasets import MODEL_FOLDER, TRAIN, folder, upload
from tests.support.env import environment
from tests.support.sweeps import controller_pass, sweep_spec, trial_jobs


@pytest.fixture
def unconfined(backend: str) -> Iterator[None]:
    allow_custom_code("default")
    with environment({"AMPFLEET_SANDBOX": "none"}):
        yield


@pytest.fixture
def bundle(unconfined: None, client: TestClient) -> dict[str, Any]:
    response = client.post("/v1/bundles", content=zip_of({"train.py": b"print('step 1/1')"}))
    assert response.status_code == 201, response.text
    return dict(response.json())


def script_sweep(bundle_id: str, command: list[str] | None = None) -> dict[str, Any]:
    base = {
        "code": {"bundle": bundle_id, "command": command or ["python", "train.py"]},
        "hyperparameters": {"epochs": 2},
    }
    return sweep_spec(base=base, pruner={"type": "none"})


def test_a_script_bundle_is_a_sweeps_base(client: TestClient, bundle: dict[str, Any]) -> None:
    response = client.post("/v1/sweeps", json=script_sweep(bundle["id"]))
    assert response.status_code == 202, response.text
    sweep = response.json()
    controller_pass()
    jobs = trial_jobs(sweep["id"])
    assert len(jobs) == 2
    for job in jobs:
        assert job.recipe == f"bundle:{bundle['id']}"
        assert job.resolved["code"]["command"] == ["python", "train.py"]
        assert job.resolved["code"]["sha256"] == bundle["sha256"]
        hyperparameters = job.resolved["hyperparameters"]
        assert hyperparameters["epochs"] == 2
        assert 1e-4 <= hyperparameters["learning_rate"] <= 1e-1
        assert job.resolved["precision"] in {"bf16", "fp32"}


def test_a_script_the_bundle_lacks_is_refused(client: TestClient, bundle: dict[str, Any]) -> None:
    response = client.post("/v1/sweeps", json=script_sweep(bundle["id"], ["python", "nope.py"]))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "code.command"
    assert client.get("/v1/sweeps").json()["items"] == []


def test_a_project_without_custom_code_cannot_sweep_it(
    client: TestClient, bundle: dict[str, Any]
) -> None:
    client.put("/v1/projects/default", json={"allow_custom_code": False})
    response = client.post("/v1/sweeps", json=script_sweep(bundle["id"]))
    assert response.status_code == 403, response.text
    assert "does not allow custom code" in response.json()["error"]["message"]


def test_custom_code_turned_off_ends_the_sweep_at_its_next_trial(
    client: TestClient, bundle: dict[str, Any]
) -> None:
    sweep = client.post("/v1/sweeps", json=script_sweep(bundle["id"])).json()
    with session_scope() as session:
        session.merge(Project(name="default", allow_custom_code=False))
    controller_pass()
    assert trial_jobs(sweep["id"]) == []
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert body["state"] == "FAILED"
    assert body["reason"].startswith("not admitted: project default does not allow custom code")
    assert body["trials"] == []


def finetune_sweep(inputs: dict[str, str]) -> dict[str, Any]:
    return sweep_spec(
        project="alpha",
        base={"recipe": "finetune-lm", "inputs": inputs, "stop": {"max_steps": 30}},
        space={"learning_rate": {"type": "log_uniform", "low": 1e-5, "high": 1e-3}},
        objectives=[{"metric": "val_loss", "direction": "minimize"}],
        pruner={"type": "none"},
    )


def test_the_recipes_input_checks_refuse_a_sweep_and_fail_a_trial(writer: TestClient) -> None:
    model = folder(writer, "base", MODEL_FOLDER)
    pairs = upload(writer, TRAIN, name="pairs", filename="train.jsonl").json()
    upload(writer, b"a,b\n1,2\n", name="table", filename="train.csv")
    refused = writer.post("/v1/sweeps", json=finetune_sweep({"model": model, "train": "table@1"}))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"][0]["field"] == "inputs.train"

    accepted = writer.post("/v1/sweeps", json=finetune_sweep({"model": model, "train": "pairs@1"}))
    assert accepted.status_code == 202, accepted.text
    sweep_id = accepted.json()["id"]
    with session_scope() as session:  # its train file as a CSV: what a trial's check sees
        row = session.get(Sweep, sweep_id)
        assert row is not None
        listed = dict(row.base_resolved["listed_inputs"])
        listed["train"] = {"files": ["train.csv"], "summary": None}
        session.execute(
            update(Sweep)
            .where(Sweep.id == sweep_id)
            .values(base_resolved={**row.base_resolved, "listed_inputs": listed})
        )
    assert pairs["version"] == 1
    controller_pass()
    assert trial_jobs(sweep_id) == []
    trials = writer.get(f"/v1/sweeps/{sweep_id}").json()["trials"]
    assert [t["state"] for t in trials] == ["failed", "failed"]
    assert trials[0]["reason"].startswith("not admitted: inputs.train: ")


def test_a_bundle_stays_while_a_running_sweep_runs_it(
    client: TestClient, bundle: dict[str, Any]
) -> None:
    sweep = client.post("/v1/sweeps", json=script_sweep(bundle["id"])).json()
    refused = client.delete(f"/v1/bundles/{bundle['id']}")
    assert refused.status_code == 409, refused.text
    assert sweep["id"] in refused.json()["error"]["message"]
    client.post(f"/v1/sweeps/{sweep['id']}/cancel")
    assert client.delete(f"/v1/bundles/{bundle['id']}").status_code == 204
