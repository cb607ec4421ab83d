"""Submitting a script (`code.command`): the API checks the command's shape and that the
script it names is in the bundle (from the bundle's stored listing: nothing is unpacked, no
user code imported); every refusal is a 422 in the one error envelope."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.archives import allow_custom_code, zip_of
from tests.support.env import environment


@pytest.fixture(autouse=True)
def unconfined(backend: str) -> Iterator[None]:
    allow_custom_code("default")
    with environment({"AMPFLEET_SANDBOX": "none"}):
        yield


@pytest.fixture
def bundle(client: TestClient) -> str:
    files = {"train.py": b"print('step 1/1')", "tools/eval.py": b"", "run.sh": b"echo"}
    response = client.post("/v1/bundles", content=zip_of(files))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def script(bundle: str, command: Any, **extra: Any) -> dict[str, Any]:
    return {"code": {"bundle": bundle, "command": command}, **extra}


def test_a_script_job_is_queued_with_its_command_and_no_steps_of_the_platform(
    client: TestClient, bundle: str
) -> None:
    command = ["python", "train.py", "--epochs", "3"]
    response = client.post("/v1/jobs", json=script(bundle, command, hyperparameters={"a": 1}))
    assert response.status_code == 202, response.text
    job = client.get(f"/v1/jobs/{response.json()['id']}").json()
    assert job["spec"]["code"]["command"] == command
    assert job["spec"]["code"]["entrypoint"] is None
    assert job["recipe"] == f"bundle:{bundle}"
    assert job["progress"]["total_steps"] is None
    (queued,) = client.get(f"/v1/jobs/{job['id']}/events").json()["items"]
    assert queued["message"].startswith("python train.py --epochs 3 on 1x1")
    listed = client.get("/v1/jobs").json()["items"]
    assert [j["id"] for j in listed] == [job["id"]]


@pytest.mark.parametrize(
    "command",
    [
        ["python", "tools/eval.py"],
        ["python", "./train.py"],
        ["python", "-m", "tools.eval"],  # a module: the ranks find it (or the requirements')
        ["bash", "run.sh"],
        ["train.py", "--x"],
    ],
)
def test_commands_that_name_what_the_bundle_has_are_accepted(
    client: TestClient, bundle: str, command: list[str]
) -> None:
    response = client.post("/v1/jobs", json=script(bundle, command))
    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    ("command", "field", "words"),
    [
        (["python", "nothere.py"], "code.command", "which bundle"),
        (["sub/nothere.py"], "code.command", "does not have"),
        ([], "code.command", "at least 1"),
        (["python"] + ["x"] * 64, "code.command", "at most 64"),
        (["python", "a" * 5000], "code.command.1", "at most 4096"),
        (["python", "tr\u0000ain.py"], "code.command.1", "NUL"),
        (["/usr/bin/python", "train.py"], "code.command", "not a program name"),
        (["../python", "train.py"], "code.command", "not a program name"),
        (["torchrun", "--nproc-per-node=2", "train.py"], "code.command", "launcher"),
        (["python", "-m", "torch.distributed.run", "train.py"], "code.command", "launcher"),
        ("python train.py", "code.command", "valid list"),
        ([3], "code.command.0", "valid string"),
    ],
)
def test_bad_commands_are_refused_naming_the_field(
    client: TestClient, bundle: str, command: Any, field: str, words: str
) -> None:
    response = client.post("/v1/jobs", json=script(bundle, command))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert field in [detail["field"] for detail in error["details"]], error
    assert words in response.text


@pytest.mark.parametrize(
    "code",
    [
        {"command": ["python", "train.py"], "entrypoint": "a.b:c"},
        {},
    ],
)
def test_exactly_one_of_entrypoint_or_command(
    client: TestClient, bundle: str, code: dict[str, Any]
) -> None:
    response = client.post("/v1/jobs", json={"code": {"bundle": bundle, **code}})
    assert response.status_code == 422, response.text
    assert "exactly one of `entrypoint`" in response.text


def test_a_script_counts_its_own_steps_and_epochs(client: TestClient, bundle: str) -> None:
    command = ["python", "train.py"]
    epochs = client.post("/v1/jobs", json=script(bundle, command, stop={"epochs": 2}))
    assert epochs.status_code == 422
    assert "counts its own passes" in epochs.text
    assert "stop" in {d["field"] for d in epochs.json()["error"]["details"]}
    limited = client.post("/v1/jobs", json=script(bundle, command, stop={"max_runtime_s": 60}))
    assert limited.status_code == 202, limited.text
    counted = client.post("/v1/jobs", json=script(bundle, command, stop={"max_steps": 10}))
    assert counted.status_code == 202, counted.text
    assert client.get(counted.headers["Location"]).json()["progress"]["total_steps"] == 10
    unbounded = client.post("/v1/jobs", json=script(bundle, ["python", "train.py", "-v"]))
    assert unbounded.status_code == 202, unbounded.text
    stored = client.get(unbounded.headers["Location"]).json()
    assert stored["progress"]["total_steps"] is None
    assert stored["spec"]["stop"] == {"max_steps": None, "epochs": None, "max_runtime_s": None}
