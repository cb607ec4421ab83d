"""A hostile tenant's bundle on a real fleet (API, scheduler, worker processes; PostgreSQL
and Redis): its recipe forges artifact records (the admin key, /etc/shadow, pid 1's
environment, the database file's folder, a FIFO), writes malformed records, and tries the
database, the broker and the API from inside the sandbox. Nothing leaks, nothing connects,
and another project's job on the same node trains to SUCCEEDED with every point."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from ampfleet.core.sandbox import bubblewrap_problem
from tests.conftest import FleetFactory
from tests.support.archives import zip_of
from tests.support.bundles import HOSTILE
from tests.support.factories import code_spec, job_spec
from tests.support.fleet import start_message, warm_sandbox_ready

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
]


def test_a_hostile_bundle_gets_nothing_while_another_project_trains(
    make_fleet: FleetFactory,
) -> None:
    fleet = make_fleet("postgres+redis", extra_env={"AMPFLEET_WARM_SANDBOX": "always"})
    data_dir = fleet.root / "var"
    targets = [["127.0.0.1", fleet.port]]
    for url, default in (
        (fleet.env["AMPFLEET_DATABASE_URL"], 5432),
        (fleet.env["AMPFLEET_BROKER_URL"], 6379),
    ):
        parts = urlsplit(url)
        targets.append([parts.hostname or "127.0.0.1", parts.port or default])
    secrets = [str(data_dir / "admin.key"), "/etc/shadow", "/proc/1/environ", str(data_dir)]
    bundle = fleet.http.post("/v1/bundles", content=zip_of({"hostile_pkg/recipe.py": HOSTILE}))
    assert bundle.status_code == 201, bundle.text
    # In the node's warm sandbox: made before it came, given its folders as it did.
    fleet.wait_until(lambda: warm_sandbox_ready(fleet), timeout=180, what="a warm sandbox")
    victim = fleet.submit(job_spec(project="victim", stop={"max_steps": 40}, log_every_steps=1))
    hostile = fleet.submit(
        code_spec(
            bundle.json()["id"],
            "hostile_pkg.recipe:recipe",
            resources={"procs_per_node": 1},
            hyperparameters={"targets": targets, "secrets": secrets},
        )
    )
    fleet.wait_for_state(hostile["id"], {"SUCCEEDED"}, timeout=300)
    fleet.wait_for_state(victim["id"], {"SUCCEEDED"}, timeout=300)

    assert start_message(fleet, hostile["id"]).startswith("warm start in a sandbox made before it")
    artifacts = fleet.http.get(f"/v1/jobs/{hostile['id']}/artifacts").json()["items"]
    names = {a["name"] for a in artifacts}
    assert not {n for n in names if n.startswith("outputs/forged")}
    assert "checkpoint-000000001" not in names
    report = json.loads(
        fleet.http.get(f"/v1/jobs/{hostile['id']}/artifacts/outputs/report.json").text
    )
    assert len(report) == len(targets)
    assert all(said.startswith("refused") for said in report.values()), report
    told = [
        e
        for e in fleet.events(hostile["id"])
        if e["reason"] in ("record_rejected", "artifact_refused")
    ]
    assert sum(e["reason"] == "artifact_refused" for e in told) == len(secrets) + 2
    assert sum(e["reason"] == "record_rejected" for e in told) == 2
    assert fleet.job(hostile["id"])["volume"]["records_rejected"] == len(secrets) + 4

    metrics = fleet.http.get(f"/v1/jobs/{victim['id']}/metrics").json()
    loss = {s["name"]: s["points"] for s in metrics["series"]}["loss"]
    assert [p["step"] for p in loss] == list(range(1, 41))
