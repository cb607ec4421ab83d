"""A response model's JSON, made where the handler runs.

A sync handler's return value is validated against its `response_model` in the thread pool,
one more hand-off between the event loop and a thread for every request (under load each
costs more than the validation it carries: the woken thread and the loop queue for the
interpreter). The busiest routes return their model's JSON as a response instead: FastAPI
sends a Response as it is, and the model was validated when it was built. The route keeps
its `response_model` for the OpenAPI document."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import Response
from pydantic import BaseModel


def json_response(
    model: BaseModel, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """`model` as FastAPI would have sent it for a `response_model` (by alias, as JSON)."""
    return Response(
        model.model_dump_json(by_alias=True),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )
