"""Node liveness is one rule (core.fleet.is_alive): the nodes listing, the Prometheus
`ampfleet_node_up` series and the scheduler's placement all call the same nodes alive."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update

from ampfleet.core.db import session_scope
from ampfleet.core.models import Node, utcnow
from ampfleet.scheduler.loop import Scheduler
from tests.support.factories import add_node, submit


def test_the_listing_the_metrics_and_placement_agree_on_which_nodes_are_alive(
    client: TestClient,
) -> None:
    add_node("fresh", slots=2)
    add_node("silent", slots=8)
    with session_scope() as session:
        session.execute(
            update(Node)
            .where(Node.id == "silent")
            .values(last_heartbeat_at=utcnow() - timedelta(hours=1))
        )

    listed = {node["id"]: node["alive"] for node in client.get("/v1/nodes").json()["items"]}
    assert listed == {"fresh": True, "silent": False}
    up = {
        line.split('"')[1]: line.rsplit(" ", 1)[1]
        for line in client.get("/metrics").text.splitlines()
        if line.startswith("ampfleet_node_up{")
    }
    assert up == {"fresh": "1", "silent": "0"}
    big = submit(client, resources={"nodes": 1, "procs_per_node": 4})  # only "silent" fits
    small = submit(client)
    assert Scheduler().run_pass() == 1
    assert client.get(f"/v1/jobs/{small['id']}").json()["state"] == "SCHEDULED"
    assert client.get(f"/v1/jobs/{big['id']}").json()["state"] == "QUEUED"
