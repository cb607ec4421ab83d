"""A sweep's events (both backends): written where the controller starts, prunes and ends
trials and where the sweep ends (a cancel too), listed as JSON, streamed as SSE and resumed
with Last-Event-ID, opened with a stream token by a client that cannot send a key; and
delivered to the webhooks that asked for them as Standard Webhooks messages."""

from __future__ import annotations

from typing import Any

import standardwebhooks
from fastapi.testclient import TestClient

from ampfleet.core.states import JobState
from tests.support.event_streams import SSE, read_stream
from tests.support.factories import add_points
from tests.support.sweeps import controller_pass, end_jobs, run, sweep_spec, trial_jobs
from tests.support.webhooks import Receiver, dispatch_all


def a_pruned_then_cancelled_sweep(client: TestClient) -> dict[str, Any]:
    """Trial 0 completes, trial 1 is pruned behind it, trial 2 starts; then a cancel."""
    spec = sweep_spec(budget={"max_trials": 5, "max_concurrent": 1})
    sweep = client.post("/v1/sweeps", json=spec).json()
    controller_pass()
    (first,) = trial_jobs(sweep["id"])
    run(first.id)
    add_points(first.id, "val_accuracy", [(10, 0.9), (20, 0.95), (30, 0.96)])
    end_jobs([first.id], JobState.SUCCEEDED)
    controller_pass()
    second = trial_jobs(sweep["id"])[1]
    run(second.id)
    add_points(second.id, "val_accuracy", [(10, 0.2)])
    controller_pass()  # pruned; trial 2 asked
    assert client.post(f"/v1/sweeps/{sweep['id']}/cancel").status_code == 202
    controller_pass()  # trial 2 was queued: cancelled at once, its end recorded now
    return sweep


def test_the_events_of_a_sweep_in_order(client: TestClient) -> None:
    sweep = a_pruned_then_cancelled_sweep(client)
    listed = client.get(f"/v1/sweeps/{sweep['id']}/events")
    assert listed.status_code == 200, listed.text
    events = listed.json()["items"]
    assert [(e["type"], e["trial"]) for e in events] == [
        ("sweep.trial_started", 0),
        ("sweep.trial_completed", 0),
        ("sweep.trial_started", 1),
        ("sweep.trial_pruned", 1),
        ("sweep.trial_started", 2),
        ("sweep.cancelled", None),
        ("sweep.trial_cancelled", 2),
    ]
    trials = client.get(f"/v1/sweeps/{sweep['id']}").json()["trials"]
    assert [e["job_id"] for e in events if e["trial"] is not None] == [
        trials[n]["job_id"] for n in (0, 0, 1, 1, 2, 2)
    ]
    completed, pruned = events[1], events[3]
    assert completed["details"]["values"] == [0.96]
    assert completed["details"]["params"] == trials[0]["params"]
    assert pruned["details"]["reason"] == trials[1]["reason"]
    assert pruned["message"] == f"trial 1 pruned: {trials[1]['reason']}"
    cancelled = events[5]
    assert cancelled["details"]["counts"] == {"complete": 1, "pruned": 1, "running": 1}
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    page = client.get(f"/v1/sweeps/{sweep['id']}/events", params={"limit": 2}).json()
    assert [e["id"] for e in page["items"]] == [e["id"] for e in events[:2]]
    rest = client.get(
        f"/v1/sweeps/{sweep['id']}/events", params={"after": page["next_after"]}
    ).json()
    assert [e["id"] for e in rest["items"]] == [e["id"] for e in events[2:]]


def test_the_stream_sends_every_event_then_ends_and_resumes(client: TestClient) -> None:
    sweep = a_pruned_then_cancelled_sweep(client)
    path = f"/v1/sweeps/{sweep['id']}/events"
    events = client.get(path).json()["items"]
    frames = read_stream(client, path, SSE)
    sent = [f["data"] for f in frames if f["event"] == "event"]
    assert sent == events
    progress = next(f["data"] for f in frames if f["event"] == "progress")
    assert progress["state"] == "CANCELLED"
    assert progress["counts"] == {"complete": 1, "pruned": 1, "cancelled": 1}
    assert frames[-1]["event"] == "end"
    resumed = read_stream(client, path, {**SSE, "Last-Event-ID": str(events[3]["id"])})
    assert [f["data"] for f in resumed if f["event"] == "event"] == events[4:]
    bad = client.get(path, headers={**SSE, "Last-Event-ID": "1:2"})
    assert bad.status_code == 422


def test_a_stream_token_opens_this_sweeps_stream_only(client: TestClient, app) -> None:
    sweep = a_pruned_then_cancelled_sweep(client)
    job = client.post("/v1/jobs", json=sweep_spec()["base"]).json()
    token = client.post(f"/v1/sweeps/{sweep['id']}/events/token").json()["token"]
    job_token = client.post(f"/v1/jobs/{job['id']}/events/token").json()["token"]
    anonymous = TestClient(app, raise_server_exceptions=False)
    path = f"/v1/sweeps/{sweep['id']}/events"
    frames = read_stream(anonymous, path, SSE, params={"token": token})
    assert frames[-1]["event"] == "end"
    refused = anonymous.get(path, headers=SSE, params={"token": job_token})
    assert refused.status_code == 401
    assert "not valid for this event stream" in refused.json()["error"]["message"]
    other_job = anonymous.get(f"/v1/jobs/{job['id']}/events", params={"token": token})
    assert other_job.status_code == 401


def test_sweep_events_reach_the_webhooks_that_asked_for_them(
    private_allowed: None, client: TestClient, receiver: Receiver
) -> None:
    hooks = {
        name: client.post("/v1/webhooks", json={"url": receiver.url, **body}).json()
        for name, body in {
            "pruned": {"states": [], "sweep_events": ["sweep.trial_pruned", "sweep.cancelled"]},
            "jobs only": {"states": ["*"]},
        }.items()
    }
    assert hooks["pruned"]["sweep_events"] == ["sweep.trial_pruned", "sweep.cancelled"]
    assert hooks["jobs only"]["sweep_events"] == []
    sweep = a_pruned_then_cancelled_sweep(client)
    dispatch_all()
    verifier = standardwebhooks.Webhook(hooks["pruned"]["secret"])
    sweep_messages = []
    for headers, body in receiver.received:
        if headers["X-Ampfleet-Event"].startswith("sweep."):
            sweep_messages.append(verifier.verify(body, headers))
    assert [m["type"] for m in sweep_messages] == ["sweep.trial_pruned", "sweep.cancelled"]
    pruned = sweep_messages[0]
    assert set(pruned) == {"type", "timestamp", "data"}
    data = pruned["data"]
    assert (data["sweep_id"], data["project"], data["trial"]) == (sweep["id"], "default", 1)
    assert data["message"].startswith("trial 1 pruned: asha: val_accuracy")
    assert pruned["timestamp"] == data["time"]
    jobs_only = client.get(f"/v1/webhooks/{hooks['jobs only']['id']}/deliveries").json()
    assert {d["event"] for d in jobs_only["items"]} == {"job.state"}
    logged = client.get(
        f"/v1/webhooks/{hooks['pruned']['id']}/deliveries", params={"job_id": sweep["id"]}
    ).json()["items"]
    assert [(d["event"], d["status"]) for d in logged] == [
        ("sweep.trial_pruned", "delivered"),
        ("sweep.cancelled", "delivered"),
    ]
    switched = client.patch(
        f"/v1/webhooks/{hooks['jobs only']['id']}", json={"sweep_events": ["*"]}
    )
    assert switched.status_code == 200, switched.text
    assert switched.json()["sweep_events"] == ["*"]
    assert switched.json()["payload_version"] == "standard"  # unchanged
    refused = client.post("/v1/webhooks", json={"url": receiver.url, "sweep_events": ["job.x"]})
    assert refused.status_code == 422
