"""Hostile input: deep nesting, huge maps, unicode, NUL, path traversal, enormous numbers.
Each is refused with a 4xx in the envelope (or stored harmlessly) and never a 5xx."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.support.factories import job_spec, row_counts


def refused(response, field: str | None = None) -> dict:
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    if field is not None:
        assert field in [d["field"] for d in error["details"]], error
    return error


def test_deeply_nested_body(client: TestClient) -> None:
    body = (
        b'{"recipe": "digits", "hyperparameters": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    )
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "body"
    assert row_counts()["jobs"] == 0


def test_huge_hyperparameter_maps_and_label_sets(client: TestClient) -> None:
    many = {f"h{i}": i for i in range(5000)}
    refused(client.post("/v1/jobs", json=job_spec(hyperparameters=many)), "hyperparameters")
    labels = {f"l{i}": "v" for i in range(100)}
    refused(client.post("/v1/jobs", json=job_spec(labels=labels)), "labels")
    assert row_counts()["jobs"] == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "../../etc/passwd"),
        ("name", "a/b"),
        ("name", "..\\windows"),
        ("project", "../other"),
        ("project", "proj\x00ect"),
        ("name", "ünïcødé"),
        ("recipe", "../../digits"),
        ("recipe", "digits\x00"),
    ],
)
def test_strings_that_could_reach_a_file_system(client: TestClient, field: str, value: str) -> None:
    response = client.post("/v1/jobs", json=job_spec(**{field: value}))
    refused(response, field)
    assert row_counts()["jobs"] == 0


def test_path_traversal_in_label_keys_and_ids(client: TestClient) -> None:
    error = refused(client.post("/v1/jobs", json=job_spec(labels={"../x": "y"})))
    assert error["details"][0]["field"].startswith("labels.../x")
    for path in ("/v1/jobs/..%2F..%2Fetc%2Fpasswd", "/v1/jobs/%2e%2e", "/v1/webhooks/..%2Fx"):
        assert client.get(path).status_code == 404


def test_unicode_is_kept_where_free_text_is_allowed(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec(labels={"team": "数据 🚀 équipe"})).json()
    assert client.get(f"/v1/jobs/{job['id']}").json()["labels"] == {"team": "数据 🚀 équipe"}


def test_nul_characters_anywhere(client: TestClient) -> None:
    refused(client.post("/v1/jobs", json=job_spec(labels={"team": "a\x00b"})), "labels.team")
    refused(client.get("/v1/jobs", params={"project": "a\x00"}), "project")
    refused(client.post("/v1/keys", json={"name": "\x00"}), "name")
    assert row_counts()["jobs"] == 0


def test_enormous_numbers(client: TestClient) -> None:
    refused(client.post("/v1/jobs", json=job_spec(seed=10**30)), "seed")
    refused(client.put("/v1/projects/p", json={"max_slots": 2**40}), "max_slots")
    refused(client.get("/v1/jobs/job_x/events", params={"after": 2**70}))
    body = json.dumps(job_spec()).replace('"max_steps": 20', '"max_steps": 1e400')
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    refused(response)


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize("depth", [65, 300, 900])
def test_hyperparameters_nested_past_the_depth_limit(client: TestClient, depth: int) -> None:
    body = json.dumps(job_spec(hyperparameters={"x": 0})).replace("0}", nested(depth) + "}")
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    detail = response.json()["error"]["details"][0]
    assert (detail["field"], detail["type"]) == ("body", "json_too_deep")
    assert row_counts()["jobs"] == 0


def test_nesting_within_the_limit_still_reaches_validation(client: TestClient) -> None:
    spec = job_spec(hyperparameters={"x": json.loads(nested(40))})
    refused(client.post("/v1/jobs", json=spec), "hyperparameters.x")


def test_deep_nesting_with_a_nul_inside(client: TestClient) -> None:
    body = '{"recipe": "digits", "hyperparameters": {"x": ' + nested(1200, '"a\\u0000"') + "}}"
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "body"


def test_brackets_inside_strings_do_not_count_as_nesting(client: TestClient) -> None:
    label = '[{"\\"' * 30
    response = client.post("/v1/jobs", json=job_spec(labels={"team": label}))
    assert response.status_code != 422 or "json_too_deep" not in response.text


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_webhook_thresholds_must_be_finite(client: TestClient, value: str) -> None:
    body = (
        '{"url": "https://example.com/hook", "metric_thresholds": '
        f'[{{"name": "loss", "op": "<", "value": {value}}}]}}'
    )
    response = client.post(
        "/v1/webhooks", content=body, headers={"content-type": "application/json"}
    )
    refused(response, "metric_thresholds.0.value")
    assert client.get("/v1/webhooks").json()["items"] == []


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1/",
        "http://127.0.0.1:99999/",
        "http://a..b/",
        f"http://{'a' * 64}.example.com/",
        "",
    ],
)
def test_malformed_webhook_urls(client: TestClient, url: str) -> None:
    response = client.post("/v1/webhooks", json={"url": url})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "url"


def test_the_deepest_body_the_setting_allows_is_refused_by_validation_not_a_500(
    backend: str, make_key
) -> None:
    from ampfleet.api.app import create_app
    from ampfleet.core.settings import Settings
    from tests.support.env import environment

    deepest = Settings.model_fields["max_json_depth"].metadata
    limit = next(m.le for m in deepest if getattr(m, "le", None) is not None)
    with environment({"AMPFLEET_MAX_JSON_DEPTH": str(limit)}):
        api = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key()}"})
        hyperparameters = {"x": json.loads(nested(limit - 3))}  # the spec's own levels: 3
        response = api.post("/v1/jobs", json=job_spec(hyperparameters=hyperparameters))
    refused(response, "hyperparameters.x")
