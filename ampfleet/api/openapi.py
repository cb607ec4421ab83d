"""The OpenAPI document as client generators need it, written in one place for every route.

Generated clients name their methods after operationIds and decode answers by what each
status documents, so both must be right for routes nobody remembered to annotate:
operationIds are camelCase names of the endpoint functions (a route's own `operation_id`
wins); the answers every route can give because of what sits in front of it (the key check
and its rate limit, the database, the request id, validation) are added here from the
route's dependencies rather than repeated on each route; FastAPI's 422 schema, which the
server never sends, is replaced by the error envelope.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from ampfleet.api.errors import ErrorEnvelope, responses

# Endpoint names that would not read well as methods of a generated client.
OPERATION_IDS = {
    "healthz": "getHealth",
    "readyz": "getReadiness",
    "metrics": "scrapeMetrics",
    "job_events": "listJobEvents",
    "job_metrics": "listJobMetrics",
    "job_logs": "listJobLogs",
    "cordon": "cordonNode",
    "uncordon": "uncordonNode",
    "drain": "drainNode",
    "create": "createKey",
    "revoke": "revokeKey",
    "deliveries": "listWebhookDeliveries",
}

ENVELOPE_REF = {"$ref": "#/components/schemas/ErrorEnvelope"}
HEADERS = {
    "X-Request-ID": "The request's id (the client's own when it sent a sane one); on every "
    "log line of the request.",
    "Retry-After": "Seconds to wait before trying again.",
    "Location": "The path of the resource made (or found again).",
    "ETag": "The object's validator (its quoted sha256), for If-None-Match and If-Range.",
}
# Endpoints that answer with a Location header.
LOCATION_OPERATIONS = {"submitJob"}
# Endpoints that touch no database, so never answer 503 for it (liveness: api/health/).
DATABASE_FREE_OPERATIONS = {"getHealth"}


def operation_id(route: APIRoute) -> str:
    name = OPERATION_IDS.get(route.name, route.name)
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def install_openapi(app: FastAPI) -> None:
    """Serve the completed document (built once, on the first request for it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = complete(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def complete(document: dict[str, Any]) -> dict[str, Any]:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    envelope = ErrorEnvelope.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, schema in envelope.pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas["ErrorEnvelope"] = envelope
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            _complete_operation(operation)
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return document


def _complete_operation(operation: dict[str, Any]) -> None:
    _drop_accept_parameter(operation)
    answers: dict[str, Any] = operation.setdefault("responses", {})
    # Any other route may find the database unavailable.
    added = [] if operation.get("operationId") in DATABASE_FREE_OPERATIONS else [503]
    if operation.get("security"):  # the key check, which also takes from the rate limit
        added += [401, 429]
    if any(p.get("in") == "path" for p in operation.get("parameters", [])):
        added.append(404)
    for code, doc in responses(*added).items():
        answers.setdefault(str(code), {"description": doc["description"]})
    for code, answer in answers.items():
        if code.startswith(("4", "5")):
            # Every error is the envelope, as JSON: not FastAPI's HTTPValidationError for
            # 422, nor the media type of a route's success answer (text/plain for /metrics).
            answer["content"] = {"application/json": {"schema": ENVELOPE_REF}}
    _document_headers(operation, answers)


def _drop_accept_parameter(operation: dict[str, Any]) -> None:
    # Accept chooses between a JSON answer and a live stream (text/event-stream, documented
    # beside it); as a parameter, a generated client would send it, get the stream and try
    # to decode it as JSON. Clients that stream (EventSource, the SDK) send it themselves.
    parameters = operation.get("parameters", [])
    operation["parameters"] = [
        p for p in parameters if (p.get("in"), p.get("name", "").lower()) != ("header", "accept")
    ]
    if not operation["parameters"]:
        del operation["parameters"]


def _document_headers(operation: dict[str, Any], answers: dict[str, Any]) -> None:
    for code, answer in answers.items():
        headers = answer.setdefault("headers", {})
        _document_header(headers, "X-Request-ID")
        if code in ("429", "503") or (code == "409" and _mentions_retry_after(operation)):
            _document_header(headers, "Retry-After")
    if operation.get("operationId") in LOCATION_OPERATIONS:
        for code in ("201", "202", "200"):
            if code in answers:
                _document_header(answers[code]["headers"], "Location")
    if "304" in answers:  # a conditional download: its answers carry the validator
        for code in ("200", "206", "304"):
            if code in answers:
                _document_header(answers[code]["headers"], "ETag")


def _mentions_retry_after(operation: dict[str, Any]) -> bool:
    return "Retry-After" in (operation.get("description") or "")


def _document_header(headers: dict[str, Any], name: str) -> None:
    headers.setdefault(name, {"description": HEADERS[name], "schema": {"type": "string"}})
