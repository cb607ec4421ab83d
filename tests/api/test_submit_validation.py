"""Bad input gets a 4xx in the one error envelope, names the offending field, writes nothing."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from ampfleet.sdk.errors import SpecError
from ampfleet.sdk.flows import load_spec
from tests.support.error_envelope import assert_envelope, fields
from tests.support.factories import job_spec, row_counts

BAD_SPECS = [
    pytest.param(job_spec(recipe="no-such-recipe"), "recipe", id="unknown-recipe"),
    pytest.param(job_spec(resources={"nodes": 0}), "resources.nodes", id="zero-nodes"),
    pytest.param(
        job_spec(resources={"procs_per_node": -2}), "resources.procs_per_node", id="negative-procs"
    ),
    pytest.param(job_spec(precision="fp8"), "precision", id="unknown-precision"),
    pytest.param(job_spec(allreduce_dtype="int4"), "allreduce_dtype", id="unknown-allreduce"),
    pytest.param(job_spec(stop={"max_steps": 0}), "stop", id="zero-steps"),
    pytest.param(job_spec(stop={}), "stop", id="no-stopping-condition"),
    pytest.param(job_spec(gpus=8), "gpus", id="unknown-field"),
    pytest.param(
        job_spec(hyperparameters={"learning_rate": "fast"}),
        "hyperparameters.learning_rate",
        id="bad-hyperparameter-type",
    ),
    pytest.param(
        job_spec(hyperparameters={"momentum": 0.9}),
        "hyperparameters.momentum",
        id="unknown-hyperparameter",
    ),
    pytest.param(job_spec(name="../../etc/passwd"), "name", id="path-in-name"),
    pytest.param({"resources": {"nodes": 1}}, "recipe", id="missing-recipe"),
    pytest.param(
        job_spec(monitoring={"hang_timeout_s": 5}),
        "monitoring.hang_timeout_s",
        id="hang-timeout-too-short",
    ),
    pytest.param(
        job_spec(monitoring={"straggler_factor": 1.0}),
        "monitoring.straggler_factor",
        id="straggler-factor-not-above-1",
    ),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SPECS)
def test_bad_spec_is_refused_naming_the_field(client: TestClient, spec: dict, field: str) -> None:
    before = row_counts()
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    error = assert_envelope(response.json(), "validation_error")
    assert field in fields(error)
    assert row_counts() == before


def test_the_api_and_the_sdk_state_a_bad_spec_in_the_same_words(client: TestClient) -> None:
    spec = job_spec(
        name="../x",
        resources={"nodes": 0, "procs_per_node": 0},
        precision="fp8",
        allreduce_dtype="int4",
        stop={"max_steps": 0},
    )
    answer = client.post("/v1/jobs", json=spec).json()["error"]
    with pytest.raises(SpecError) as refused_locally:
        load_spec(spec)
    local = refused_locally.value
    assert [(d.field, d.message, d.type) for d in local.details] == [
        (d["field"], d["message"], d["type"]) for d in answer["details"]
    ]
    assert len(answer["details"]) == 6  # every one in the details, the first five summed up
    summary = "; ".join(f"{d['field']}: {d['message']}" for d in answer["details"][:5])
    assert answer["message"] == f"invalid request: {summary}"
    assert local.message == f"invalid job spec: {summary}"
    bad_hyperparameters = job_spec(hyperparameters={"learning_rate": "fast", "momentum": 0.9})
    hyperparameters = client.post("/v1/jobs", json=bad_hyperparameters).json()["error"]
    assert fields(hyperparameters) == {"hyperparameters.learning_rate", "hyperparameters.momentum"}
    summary = "; ".join(f"{d['field']}: {d['message']}" for d in hyperparameters["details"])
    assert hyperparameters["message"] == f"invalid hyperparameters: {summary}"


def test_a_stop_with_no_end_is_refused_saying_what_would_do(client: TestClient) -> None:
    error = client.post("/v1/jobs", json=job_spec(stop={})).json()["error"]
    assert "give max_steps, epochs or max_runtime_s" in error["message"]
    assert "default of 100 steps" in error["message"]


def test_a_runtime_alone_is_a_spec_and_a_missing_stop_is_100_steps(client: TestClient) -> None:
    timed = client.post("/v1/jobs", json=job_spec(stop={"max_runtime_s": 300}))
    assert timed.status_code == 202, timed.text
    job = timed.json()
    assert job["spec"]["stop"] == {"max_steps": None, "epochs": None, "max_runtime_s": 300}
    assert job["progress"]["total_steps"] is None  # it trains until its time is up
    default = client.post("/v1/jobs", json={"recipe": "digits"}).json()
    assert default["spec"]["stop"]["max_steps"] == 100
    assert default["progress"]["total_steps"] == 100


def test_malformed_json_is_refused(client: TestClient) -> None:
    response = client.post(
        "/v1/jobs", content=b'{"recipe": "digits",', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    error = assert_envelope(response.json(), "validation_error")
    assert fields(error) == {"body"}
    assert row_counts()["jobs"] == 0


def test_oversized_body_gets_413(client: TestClient) -> None:
    huge = job_spec(labels={"padding": "x" * 200}, hyperparameters={})
    body = json.dumps(huge).encode() + b" " * (2 << 20)
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert_envelope(response.json(), "payload_too_large")
    assert row_counts()["jobs"] == 0


def test_oversized_chunked_body_gets_413(client: TestClient) -> None:
    def chunks():
        yield b'{"recipe": "digits", "name": "'
        for _ in range(40):
            yield b"a" * 65536
        yield b'"}'

    response = client.post(
        "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert row_counts()["jobs"] == 0


def test_too_many_hyperparameters(client: TestClient) -> None:
    spec = job_spec(hyperparameters={f"h{i}": i for i in range(100)})
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 422
    assert row_counts()["jobs"] == 0


def test_wrong_content_type_is_refused(client: TestClient) -> None:
    response = client.post(
        "/v1/jobs", content=b"recipe=digits", headers={"content-type": "text/plain"}
    )
    assert response.status_code == 422
    assert_envelope(response.json(), "validation_error")
    assert row_counts()["jobs"] == 0
