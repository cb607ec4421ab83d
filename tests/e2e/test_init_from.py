"""`init_from` end to end, with real processes: the node fetches the other job's checkpoint
from the store and its ranks start from it. A digits job continued with 'full' reports its
steps past the checkpoint, starting near the loss where the first stopped, and its manifest
names where it came from; a plain script (bundled code, in the sandbox) finds the
checkpoint's files read-only under AMPFLEET_INIT_DIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.sdk import Client
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, fleet_per_module

pytestmark = pytest.mark.e2e

fleet = fleet_per_module()  # each test runs and reads jobs of its own

LISTS_THE_INIT_DIR = b"""
import os, pathlib
folder = pathlib.Path(os.environ["AMPFLEET_INIT_DIR"])
print("init load", os.environ["AMPFLEET_INIT_LOAD"], flush=True)
print("init files", ",".join(sorted(p.name for p in folder.iterdir())), flush=True)
try:
    (folder / "x").write_text("mine now")
    print("init dir writable", flush=True)
except OSError:
    print("init dir read-only", flush=True)
"""


def _losses(fleet: Fleet, job_id: str) -> dict[int, float]:
    series = fleet.http.get(f"/v1/jobs/{job_id}/metrics").json()["series"]
    (loss,) = [s for s in series if s["name"] == "loss"]
    return {int(p["step"]): float(p["value"]) for p in loss["points"]}


def test_a_job_continues_another_from_its_checkpoint(fleet: Fleet, tmp_path: Path) -> None:
    first = fleet.submit(job_spec(stop={"max_steps": 20}, log_every_steps=1))
    fleet.wait_for_state(first["id"], {"SUCCEEDED"})
    theirs = _losses(fleet, first["id"])

    spec = job_spec(
        init_from={"job": first["id"], "load": "full"}, stop={"max_steps": 30}, log_every_steps=1
    )
    continued = fleet.submit(spec)
    done = fleet.wait_for_state(continued["id"], {"SUCCEEDED"})
    assert done["progress"]["step"] == 30
    ours = _losses(fleet, continued["id"])
    assert sorted(ours) == list(range(21, 31))  # its step count went on from 20
    assert ours[21] < 0.5 * theirs[1]  # from the trained weights, not from scratch
    messages = [e["message"] for e in fleet.events(continued["id"])]
    assert any(f"continues job {first['id']} from its checkpoint of step 20" in m for m in messages)

    artifacts = fleet.http.get(f"/v1/jobs/{continued['id']}/artifacts").json()["items"]
    [manifest_url] = [a["download_url"] for a in artifacts if a["name"] == "manifest.json"]
    manifest = json.loads(fleet.http.get(manifest_url).content)
    assert (manifest["init_from"]["job"], manifest["init_from"]["step"]) == (first["id"], 20)
    assert manifest["init_from"]["load"] == "full"


@pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap")
def test_a_plain_script_reads_the_checkpoint_read_only(fleet: Fleet, tmp_path: Path) -> None:
    source = fleet.submit(job_spec(stop={"max_steps": 5}))
    fleet.wait_for_state(source["id"], {"SUCCEEDED"})
    project = tmp_path / "project"
    project.mkdir()
    (project / "look.py").write_bytes(LISTS_THE_INIT_DIR)
    with Client(fleet.base_url, fleet.admin_key) as client:
        bundle = client.upload_bundle(project)
        job = client.submit(
            {"resources": {"procs_per_node": 1}, "init_from": {"job": source["id"]}},
            command=["python", "look.py"],
            code=bundle.id,
        )
    fleet.wait_for_state(job.id, {"SUCCEEDED"})
    logs = fleet.http.get(f"/v1/jobs/{job.id}/logs", params={"rank": 0}).json()["items"]
    lines = [entry["line"] for entry in logs]
    assert "init load weights" in lines, lines
    [files] = [line for line in lines if line.startswith("init files ")]
    assert "meta.json" in files.split(" ", 2)[2].split(","), files
    assert "init dir read-only" in lines, lines
