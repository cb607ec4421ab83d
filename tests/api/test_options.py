"""OPTIONS tells every method a path takes; a CORS preflight still works when configured."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.env import environment


def test_options_lists_every_method_of_the_path(anonymous: TestClient) -> None:
    for path, methods in {
        "/v1/jobs": "GET, OPTIONS, POST",
        "/v1/jobs/job_00000000000000000000000000": "DELETE, GET, OPTIONS, PATCH",
        "/v1/keys/key_x": "DELETE, OPTIONS",
    }.items():
        response = anonymous.options(path)
        assert response.status_code == 204, (path, response.text)
        assert response.headers["Allow"] == methods
        assert response.content == b""
    assert anonymous.options("/v1/nope").status_code == 404


def test_every_documented_operation_is_in_its_paths_allow(anonymous: TestClient) -> None:
    for path, item in anonymous.get("/openapi.json").json()["paths"].items():
        allowed = set(
            anonymous.options(path.replace("{", "").replace("}", "")).headers["Allow"].split(", ")
        )
        assert {method.upper() for method in item} <= allowed, path


def test_a_cors_preflight_is_answered_when_configured(backend: str) -> None:
    from ampfleet.api.app import create_app

    with environment({"AMPFLEET_CORS_ORIGINS": '["https://console.example"]'}):
        client = TestClient(create_app())
        preflight = client.options(
            "/v1/jobs",
            headers={
                "Origin": "https://console.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "Authorization, Content-Type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://console.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        plain = client.options("/v1/jobs", headers={"Origin": "https://console.example"})
        assert plain.status_code == 204
        assert plain.headers["Allow"] == "GET, OPTIONS, POST"
        assert plain.headers["access-control-allow-origin"] == "https://console.example"
