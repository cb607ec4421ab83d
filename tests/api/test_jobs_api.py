"""The jobs resource over HTTP (in-process ASGI client, real databases)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from ampfleet.api.jobs.schemas import JobOut
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import transition
from ampfleet.core.states import JobState
from tests.support.factories import job_spec, row_counts, submit


def test_submit_returns_202_with_location_and_resolved_defaults(client: TestClient) -> None:
    response = client.post("/v1/jobs", json=job_spec(name="first"))
    assert response.status_code == 202
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] == "QUEUED"
    assert job["attempt"] == 0
    assert job["progress"] == {
        "step": 0,
        "total_steps": 20,
        "fraction": 0.0,
        "eta_seconds": None,
        "eta_confidence": None,
        "steps_per_s": None,
    }
    assert job["precision"] == {"requested": "bf16", "effective": None}
    # Defaults of the spec and of the recipe's hyperparameters are resolved and stored.
    assert job["spec"]["hyperparameters"]["hidden"] == 256
    assert job["spec"]["retry"]["max_restarts"] == 2
    assert client.get(job["id"] and f"/v1/jobs/{job['id']}").json()["id"] == job["id"]
    events = client.get(f"/v1/jobs/{job['id']}/events").json()["items"]
    assert [(e["from_state"], e["to_state"], e["reason"]) for e in events] == [
        (None, "QUEUED", "submitted")
    ]


def test_submit_and_get_answer_the_documented_job_as_json(client: TestClient) -> None:
    """Both routes send their JobOut's JSON themselves (no response-model pass in a
    thread): it is exactly what the model says, and the document still names JobOut."""
    submitted = client.post("/v1/jobs", json=job_spec(labels={"team": "vision"}))
    fetched = client.get(f"/v1/jobs/{submitted.json()['id']}")
    for response in (submitted, fetched):
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert JobOut.model_validate(body).model_dump(mode="json", by_alias=True) == body
    assert fetched.json()["goodput"] is not None  # GET's detail, which listings leave out
    paths = client.get("/openapi.json").json()["paths"]
    for verb, path, code in (("post", "/v1/jobs", "202"), ("get", "/v1/jobs/{job_id}", "200")):
        schema = paths[path][verb]["responses"][code]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/JobOut"}


def test_a_job_says_how_many_ranks_it_runs_whatever_its_shape(client: TestClient) -> None:
    shaped = client.post("/v1/jobs", json=job_spec(resources={"nodes": 2, "procs_per_node": 3}))
    total = client.post("/v1/jobs", json=job_spec(resources={"procs": 5}))
    assert shaped.json()["gang_size"] == 6
    assert client.get(f"/v1/jobs/{total.json()['id']}").json()["gang_size"] == 5


def test_get_unknown_job_is_404_in_envelope(client: TestClient) -> None:
    for path in ("/v1/jobs/job_nope", "/v1/jobs/job_nope/events", "/v1/jobs/job_nope/metrics"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    response = client.post("/v1/jobs/job_nope/cancel")
    assert response.status_code == 404


def test_list_is_newest_first_with_cursor_pagination(client: TestClient) -> None:
    ids = [submit(client, name=f"j{i}")["id"] for i in range(5)]
    seen = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/jobs", params=params).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


def test_events_page_on_with_next_after_until_it_is_null(client: TestClient) -> None:
    job_id = submit(client, priority="low")["id"]
    for priority in ("high", "normal", "low"):  # submitted + 3 priority changes: 4 events
        assert client.patch(f"/v1/jobs/{job_id}", json={"priority": priority}).status_code == 200
    everything = client.get(f"/v1/jobs/{job_id}/events").json()
    assert len(everything["items"]) == 4
    assert everything["next_after"] is None  # fewer than the limit: nothing after this page
    pages, after = [], 0
    while after is not None:
        page = client.get(f"/v1/jobs/{job_id}/events", params={"after": after, "limit": 3})
        pages.append([e["id"] for e in page.json()["items"]])
        after = page.json()["next_after"]
        if after is not None:
            assert after == pages[-1][-1]  # the last id of a full page
    assert pages == [[e["id"] for e in everything["items"][:3]], [everything["items"][3]["id"]]]


def test_list_filters_by_state(client: TestClient) -> None:
    queued = submit(client)["id"]
    cancelled = submit(client)["id"]
    client.post(f"/v1/jobs/{cancelled}/cancel")
    only_queued = client.get("/v1/jobs", params={"state": "QUEUED"}).json()["items"]
    assert [j["id"] for j in only_queued] == [queued]
    both = client.get("/v1/jobs", params=[("state", "QUEUED"), ("state", "CANCELLED")]).json()
    assert {j["id"] for j in both["items"]} == {queued, cancelled}
    bad = client.get("/v1/jobs", params={"state": "SLEEPING"})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "state.0"


def test_bad_cursor_is_422(client: TestClient) -> None:
    response = client.get("/v1/jobs", params={"cursor": "%%%"})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "cursor"


def test_cancel_queued_job_ends_cancelled_and_is_idempotent(client: TestClient) -> None:
    job_id = submit(client)["id"]
    first = client.post(f"/v1/jobs/{job_id}/cancel")
    assert first.status_code == 202
    assert first.json()["state"] == "CANCELLED"
    assert first.json()["finished_at"] is not None
    again = client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


def test_cancel_running_job_goes_cancelling(client: TestClient) -> None:
    job_id = submit(client)["id"]
    with session_scope() as session:
        assert transition(
            session,
            job_id,
            JobState.SCHEDULED,
            from_states={JobState.QUEUED},
            reason="test",
            new_attempt=1,
        )
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.json()["state"] == "CANCELLING"
    assert client.post(f"/v1/jobs/{job_id}/cancel").json()["state"] == "CANCELLING"


def test_idempotency_key_returns_the_same_job(client: TestClient) -> None:
    headers = {"Idempotency-Key": "build-42"}
    first = client.post("/v1/jobs", json=job_spec(), headers=headers)
    second = client.post("/v1/jobs", json=job_spec(), headers=headers)
    assert first.status_code == 202
    assert second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    other = client.post("/v1/jobs", json=job_spec(seed=7), headers=headers)
    assert other.status_code == 422
    assert other.json()["error"]["details"][0]["field"] == "Idempotency-Key"
    assert row_counts()["jobs"] == 1


def test_nodes_and_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/v1/nodes").json() == {"items": []}


def test_unknown_route_and_method_use_the_envelope(client: TestClient) -> None:
    assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"
    response = client.delete("/v1/jobs")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/v1/jobs", "post"),
        ("/v1/jobs", "get"),
        ("/v1/jobs/{job_id}", "get"),
        ("/v1/jobs/{job_id}/cancel", "post"),
        ("/v1/jobs/{job_id}/events", "get"),
        ("/v1/jobs/{job_id}/metrics", "get"),
        ("/v1/nodes", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ],
)
def test_openapi_documents_every_route_with_models(
    client: TestClient, path: str, method: str
) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"][path][method]
    success = next(code for code in operation["responses"] if code.startswith("2"))
    assert "$ref" in str(operation["responses"][success]["content"]["application/json"]["schema"])
    if path not in {"/v1/nodes", "/healthz"}:  # liveness answers nothing but 200
        errors = [c for c in operation["responses"] if c[0] in "45"]
        assert errors, f"{method} {path} documents no errors"
        for code in errors:
            ref = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith(("ErrorEnvelope", "HTTPValidationError"))
