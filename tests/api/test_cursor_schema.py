"""Page cursors are documented as tightly as the server checks them, and a malformed one
is a 422 naming `cursor`."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.support.factories import job_spec

PAGED = ("/v1/jobs", "/v1/queue")


def cursor_schema(client: TestClient, path: str) -> dict:
    parameters = client.get("/openapi.json").json()["paths"][path]["get"]["parameters"]
    cursor = next(p for p in parameters if p["name"] == "cursor")
    return next(s for s in cursor["schema"]["anyOf"] if s.get("type") == "string")


@pytest.mark.parametrize("path", PAGED)
def test_the_cursor_is_documented_with_its_pattern(client: TestClient, path: str) -> None:
    schema = cursor_schema(client, path)
    assert schema["pattern"].startswith("^")
    assert schema["pattern"].endswith("$")
    assert "maxLength" in schema or "{" in schema["pattern"]


@pytest.mark.parametrize("path", PAGED)
@pytest.mark.parametrize("cursor", ["", "not a cursor!", "a" * 401, "=="])
def test_a_malformed_cursor_is_422(client: TestClient, path: str, cursor: str) -> None:
    response = client.get(path, params={"cursor": cursor})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "cursor"


@pytest.mark.parametrize("path", PAGED)
def test_the_cursors_the_server_returns_fit_the_documented_pattern(
    client: TestClient, path: str
) -> None:
    for _ in range(3):
        assert client.post("/v1/jobs", json=job_spec()).status_code == 202
    page = client.get(path, params={"limit": 1}).json()
    assert re.fullmatch(cursor_schema(client, path)["pattern"], page["next_cursor"])
    assert client.get(path, params={"limit": 1, "cursor": page["next_cursor"]}).status_code == 200
