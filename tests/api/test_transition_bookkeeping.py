"""Every way a job changes state (submit, a scheduling pass's bulk placement, a single
transition) leaves the same bookkeeping: one event row per change and one `job.state`
delivery per webhook of the job's project, none for a project without webhooks."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ampfleet.scheduler.loop import Scheduler
from tests.support.env import environment
from tests.support.factories import add_node, submit


def test_submit_placement_and_cancel_each_leave_an_event_and_a_delivery(
    app, make_key, backend: str
) -> None:
    alpha = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    beta = TestClient(app, headers={"Authorization": f"Bearer {make_key('beta', 'write')}"})
    with environment({"AMPFLEET_WEBHOOK_ALLOW_PRIVATE": "true"}):
        hook = alpha.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/hook", "states": ["*"]}
        ).json()
    add_node("node-1", 4)
    watched, unwatched = submit(alpha)["id"], submit(beta)["id"]
    assert Scheduler().run_pass() == 2
    assert alpha.post(f"/v1/jobs/{watched}/cancel").status_code == 202

    expected = [
        (None, "QUEUED", "submitted", 0),
        ("QUEUED", "SCHEDULED", "placed", 1),
        ("SCHEDULED", "CANCELLING", "cancel_requested", 1),
    ]
    events = alpha.get(f"/v1/jobs/{watched}/events").json()["items"]
    assert [(e["from_state"], e["to_state"], e["reason"], e["attempt"]) for e in events] == (
        expected
    )
    deliveries = alpha.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]
    told = [d["payload"] for d in deliveries]
    assert [(p["from_state"], p["to_state"], p["reason"], p["attempt"]) for p in told] == (expected)
    assert [p["message"] for p in told] == [e["message"] for e in events]
    assert {d["job_id"] for d in deliveries} == {watched}
    assert [d["event_key"] for d in deliveries] == [
        "state:QUEUED:0",
        "state:SCHEDULED:1",
        "state:CANCELLING:1",
    ]
    unwatched_events = beta.get(f"/v1/jobs/{unwatched}/events").json()["items"]
    assert [(e["from_state"], e["to_state"]) for e in unwatched_events] == [
        (None, "QUEUED"),
        ("QUEUED", "SCHEDULED"),
    ]
