"""A hostile tenant's multi-node bundled job across two hosts of the network bed, through
the normal submit path: its ranks run sandboxed on the hosts' own network (they must meet
their peers) under the egress filter of their uids (workers/egress.py). They rendezvous and
train to SUCCEEDED across the link, while rank 0's attempts on the database and the broker
(listening on the bed's root side, which trusts the bed's subnet) are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.network.conftest import BedFleet, bed_fleet
from tests.security.egress_support import needs_filter
from tests.support.archives import zip_of
from tests.support.bundles import HOSTILE
from tests.support.factories import code_spec

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.usefixtures("netbed_available"),
    needs_filter,
]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[BedFleet]:
    with bed_fleet(tmp_path, hosts=2, rate="1gbit", cpu_slots=1) as f:
        yield f


def test_a_multi_node_bundle_trains_across_hosts_and_reaches_no_service(
    fleet: BedFleet,
) -> None:
    targets = []
    for url, default in (
        (fleet.env["AMPFLEET_DATABASE_URL"], 5432),
        (fleet.env["AMPFLEET_BROKER_URL"], 6379),
    ):
        parts = urlsplit(url)
        targets.append([parts.hostname, parts.port or default])
    bundle = fleet.http.post("/v1/bundles", content=zip_of({"hostile_pkg/recipe.py": HOSTILE}))
    assert bundle.status_code == 201, bundle.text
    job = fleet.submit(
        code_spec(
            bundle.json()["id"],
            "hostile_pkg.recipe:recipe",
            resources={"nodes": 2, "procs_per_node": 1},
            stop={"max_steps": 30},
            hyperparameters={"targets": targets, "secrets": []},
        )
    )
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED", "FAILED"}, timeout=300)
    assert done["state"] == "SUCCEEDED", done["failure_reason"]
    events = fleet.events(job["id"])
    started = [e for e in events if e["to_state"] == "RUNNING"]
    assert started[0]["message"].startswith("2 ranks on gloo")
    report = json.loads(fleet.http.get(f"/v1/jobs/{job['id']}/artifacts/outputs/report.json").text)
    assert len(report) == len(targets)
    assert all(said.startswith("refused") for said in report.values()), report
