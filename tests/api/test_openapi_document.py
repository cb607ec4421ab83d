"""The OpenAPI document as client generators read it: every operation named in camelCase,
once; errors documented as the envelope the server sends; the answers every route can give
(503 wherever a database is touched, and 401 and 429 behind the key check) and the response
headers on every route, new ones included."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi import FastAPI

CAMEL_CASE = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)*$")
ENVELOPE = "#/components/schemas/ErrorEnvelope"


@pytest.fixture
def document(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_operation_has_a_unique_camel_case_id(document: dict[str, Any]) -> None:
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert [i for i in ids if not CAMEL_CASE.fullmatch(i)] == []
    assert len(ids) == len(set(ids))
    assert {"submitJob", "getJob", "listJobs", "createKey", "scrapeMetrics"} <= set(ids)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_error_is_the_envelope_with_the_answers_every_route_can_give(
    document: dict[str, Any],
) -> None:
    assert "HTTPValidationError" not in str(document)
    for method, path, operation in operations(document):
        answers = operation["responses"]
        where = f"{method} {path}"
        # Liveness touches no database, so it has no 503 to document; every other route does.
        assert ("503" in answers) != (operation["operationId"] == "getHealth"), where
        if operation.get("security"):
            assert {"401", "429"} <= answers.keys(), where
            assert "Retry-After" in answers["429"]["headers"], where
        if "{" in path:
            assert "404" in answers, where
        for code, answer in answers.items():
            assert "X-Request-ID" in answer["headers"], (where, code)
            if code.startswith(("4", "5")):
                schema = answer["content"]["application/json"]["schema"]
                assert schema == {"$ref": ENVELOPE}, (where, code)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_headers_and_streams_are_documented(document: dict[str, Any]) -> None:
    submit = document["paths"]["/v1/jobs"]["post"]["responses"]
    assert {"Location", "X-Request-ID"} <= submit["202"]["headers"].keys()
    assert "Location" in submit["200"]["headers"]
    assert "Retry-After" in submit["409"]["headers"]
    download = document["paths"]["/v1/jobs/{job_id}/artifacts/{name}"]["get"]["responses"]
    assert "ETag" in download["200"]["headers"]
    for stream in ("events", "logs"):
        operation = document["paths"][f"/v1/jobs/{{job_id}}/{stream}"]["get"]
        content = operation["responses"]["200"]["content"]
        assert content["text/event-stream"]["schema"] == {"type": "string"}
        # A generated client must not ask for the stream it would then decode as JSON.
        names = [p["name"].lower() for p in operation.get("parameters", [])]
        assert "accept" not in names
