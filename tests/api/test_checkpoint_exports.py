"""A job's checkpoints with the metrics reported at their steps, the samples its model
generated at each evaluation, and the export of one checkpoint as a model: a job of 0 steps
that starts from the checkpoint's weights, with the source job's spec and its inputs as the
source read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.api.artifacts.service import SAMPLE_TEXT_LIMIT
from ampfleet.core.artifact_names import samples_name
from tests.conftest import KeyFactory
from tests.support.clients import keyed
from tests.support.datasets import upload
from tests.support.factories import add_artifact, job_spec, platform_checkpoint, report_step


def test_checkpoints_carry_the_metrics_of_their_step_and_samples_their_text(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    writer = keyed(app, make_key("alpha", "write"))
    job = writer.post("/v1/jobs", json=job_spec()).json()
    report_step(job["id"], 1, 10, {"loss": 2.0})
    report_step(job["id"], 1, 20, {"loss": 1.5, "val_loss": 1.9})
    report_step(job["id"], 2, 20, {"val_loss": 1.7})  # reported again by a later attempt
    for step in (20, 30):
        add_artifact(tmp_path, job, f"checkpoint-{step:09d}", "checkpoint", b"tar", step)
    texts = {10: "### prompt\na\n", 20: "### prompt\nb\n", 30: "é" * SAMPLE_TEXT_LIMIT}
    for step, text in texts.items():
        add_artifact(tmp_path, job, samples_name(step), "sample", text.encode(), step)

    reader = keyed(app, make_key("alpha", "read"))
    listed = reader.get(f"/v1/jobs/{job['id']}/checkpoints").json()["items"]
    assert [(c["step"], c["metrics"]) for c in listed] == [
        (20, {"loss": 1.5, "val_loss": 1.7}),
        (30, {}),
    ]
    assert listed[0]["export_url"] == f"/v1/jobs/{job['id']}/checkpoints/20/export"

    samples = reader.get(f"/v1/jobs/{job['id']}/samples", params={"limit": 2}).json()["items"]
    assert [(s["step"], s["truncated"]) for s in samples] == [(20, False), (30, True)]
    assert samples[0]["text"] == texts[20]
    assert len(samples[1]["text"]) == SAMPLE_TEXT_LIMIT // 2  # two bytes a character
    assert (
        samples[0]["download_url"] == f"/v1/jobs/{job['id']}/artifacts/samples/step-000000020.txt"
    )
    other = keyed(app, make_key("beta", "read"))
    assert other.get(f"/v1/jobs/{job['id']}/samples").status_code == 404


def exported(client: TestClient, job_id: str, step: int, body: Any = None) -> Any:
    return client.post(f"/v1/jobs/{job_id}/checkpoints/{step}/export", json=body)


def test_a_checkpoint_is_exported_by_a_job_of_zero_steps_from_it(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    writer = keyed(app, make_key("alpha", "write"))
    upload(writer, b"a,b\n", name="table", filename="t.csv")
    spec = job_spec(name="digits-run", inputs={"extra": "table"}, labels={"team": "ml"})
    job = writer.post("/v1/jobs", json=spec).json()
    platform_checkpoint(tmp_path, job, 20)
    upload(writer, b"c,d\n", name="table", filename="t.csv")  # `table` means version 2 now

    answered = exported(writer, job["id"], 20, {"dtype": "bf16"})
    assert answered.status_code == 202, answered.text
    export = answered.json()
    assert answered.headers["location"] == f"/v1/jobs/{export['id']}"
    assert export["name"] == "digits-run-step-20"
    assert export["state"] == "QUEUED"
    started_from = export["spec"]["init_from"]
    assert (started_from["job"], started_from["step"], started_from["load"]) == (
        job["id"],
        20,
        "weights",
    )
    assert export["spec"]["stop"]["max_steps"] == 0
    assert export["spec"]["export"]["dtype"] == "bf16"
    extra = export["spec"]["inputs"]["extra"]
    assert (extra["name"], extra["version"]) == ("table", 1)  # what the source job read
    assert export["spec"]["hyperparameters"] == job["spec"]["hyperparameters"]
    assert export["spec"]["labels"] == {"team": "ml", "exported-from": f"{job['id']}-20"}

    assert exported(writer, job["id"], 30).status_code == 404
    reader = keyed(app, make_key("alpha", "read"))
    assert exported(reader, job["id"], 20).status_code == 403
    assert exported(writer, job["id"], 20, {"dtype": "fp8"}).status_code == 422
    # Zero steps only export what init_from names.
    refused = writer.post("/v1/jobs", json=job_spec(stop={"max_steps": 0}))
    assert refused.status_code == 422
    (detail,) = refused.json()["error"]["details"]
    assert detail["field"] == "stop"
    assert (
        "max_steps 0 trains nothing: it evaluates and exports the checkpoint" in detail["message"]
    )
