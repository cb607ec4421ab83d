"""`init_from` at submit: resolved to one listed checkpoint of a job of the same project, or
refused with a 422 in the one error envelope that names the field and the reason, writing
nothing (an unknown job, another project's, no checkpoint, no checkpoint of that step, a
plain script's files for a recipe, 'full' for other training or with no steps left)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Artifact
from tests.conftest import KeyFactory
from tests.support.clients import keyed
from tests.support.error_envelope import assert_envelope, fields
from tests.support.factories import add_artifact, job_spec, row_counts


def _platform_checkpoint(tmp_path: Path, job: dict[str, Any], step: int) -> None:
    name = f"checkpoint-{step:09d}"
    add_artifact(tmp_path, job, name, "checkpoint", f"ckpt {step}".encode(), step)
    folder = f"ckpt-{step:09d}"
    with session_scope() as session:
        row = session.scalar(select(Artifact).where(Artifact.name == name))
        row.details = {"files": [f"{folder}/.metadata", f"{folder}/meta.json"], "world_size": 2}


@pytest.fixture
def alpha(app: FastAPI, make_key: KeyFactory) -> TestClient:
    return keyed(app, make_key("alpha", "write"))


@pytest.fixture
def source(alpha: TestClient, tmp_path: Path) -> dict[str, Any]:
    """A digits job of alpha with checkpoints of steps 10 and 20 listed."""
    job: dict[str, Any] = alpha.post("/v1/jobs", json=job_spec()).json()
    for step in (10, 20):
        _platform_checkpoint(tmp_path, job, step)
    return job


def test_latest_resolves_to_the_newest_listed_checkpoint(
    alpha: TestClient, source: dict[str, Any]
) -> None:
    response = alpha.post("/v1/jobs", json=job_spec(init_from={"job": source["id"]}))
    assert response.status_code == 202, response.text
    stored = alpha.get(f"/v1/jobs/{response.json()['id']}").json()["spec"]["init_from"]
    assert (stored["job"], stored["checkpoint"], stored["load"], stored["step"]) == (
        source["id"],
        "latest",
        "weights",
        20,
    )
    assert stored["name"] == "checkpoint-000000020"
    assert len(stored["sha256"]) == 64


def test_a_step_and_full_with_steps_left_are_taken(
    alpha: TestClient, source: dict[str, Any]
) -> None:
    spec = job_spec(
        init_from={"job": source["id"], "checkpoint": 10, "load": "full"},
        stop={"max_steps": 40},
    )
    response = alpha.post("/v1/jobs", json=spec)
    assert response.status_code == 202, response.text
    assert response.json()["spec"]["init_from"]["step"] == 10


@pytest.mark.parametrize(
    ("init_from", "overrides", "field", "says"),
    [
        pytest.param(
            {"job": "job_" + "0" * 26},
            {},
            "init_from.job",
            "not found in project alpha",
            id="unknown-job",
        ),
        pytest.param(
            {"checkpoint": 15},
            {},
            "init_from.checkpoint",
            "it lists steps 10, 20",
            id="no-such-step",
        ),
        pytest.param(
            {"load": "full"},
            {"stop": {"max_steps": 20}},
            "stop.max_steps",
            "give stop.max_steps above 20",
            id="full-without-steps-left",
        ),
        pytest.param(
            {"load": "full"},
            {"recipe": "charlm", "stop": {"max_steps": 40}},
            "init_from.load",
            "ran recipe digits, not recipe charlm",
            id="full-other-training",
        ),
        pytest.param({"job": "nope"}, {}, "init_from.job", "", id="not-a-job-id"),
        pytest.param({"checkpoint": -1}, {}, "init_from.checkpoint", "", id="negative-step"),
        pytest.param({"load": "half"}, {}, "init_from.load", "", id="unknown-load"),
    ],
)
def test_what_cannot_start_the_job_is_refused_with_the_reason(
    alpha: TestClient,
    source: dict[str, Any],
    init_from: dict[str, Any],
    overrides: dict[str, Any],
    field: str,
    says: str,
) -> None:
    before = row_counts()
    spec = job_spec(init_from={"job": source["id"], **init_from}, **overrides)
    response = alpha.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    error = assert_envelope(response.json(), "validation_error")
    assert any(f == field or f.startswith(f"{field}.") for f in fields(error)), error
    assert says in error["message"] + str(error["details"])
    assert row_counts() == before


def test_another_projects_job_is_not_found(
    app: FastAPI, make_key: KeyFactory, source: dict[str, Any]
) -> None:
    beta = keyed(app, make_key("beta", "write"))
    spec = job_spec(project="beta", init_from={"job": source["id"]})
    response = beta.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert f"job {source['id']} not found in project beta" in response.text


def test_a_job_without_checkpoints_or_with_a_plain_scripts_files_is_refused(
    alpha: TestClient, tmp_path: Path
) -> None:
    bare = alpha.post("/v1/jobs", json=job_spec()).json()
    response = alpha.post("/v1/jobs", json=job_spec(init_from={"job": bare["id"]}))
    assert response.status_code == 422, response.text
    assert "has no checkpoint listed" in response.text
    add_artifact(tmp_path, bare, "checkpoint-000000005", "checkpoint", b"files", 5)
    with session_scope() as session:
        row = session.scalar(select(Artifact).where(Artifact.job_id == bare["id"]))
        row.details = {"files": ["ckpt-000000005/last.pt", "ckpt-000000005/_script_snapshot.json"]}
    response = alpha.post("/v1/jobs", json=job_spec(init_from={"job": bare["id"]}))
    assert response.status_code == 422, response.text
    assert "holds a plain script's own files" in response.text
