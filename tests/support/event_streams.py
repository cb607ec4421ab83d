"""The API's server-sent event streams read through an in-process client to their end: every
frame as {field: value}, its `data` decoded from JSON. SSE is the Accept header that asks for
one."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

SSE = {"Accept": "text/event-stream"}


def read_frames(client: TestClient, job_id: str, headers: dict[str, str]) -> list[dict]:
    return read_stream(client, f"/v1/jobs/{job_id}/events", headers)


def read_stream(
    client: TestClient, path: str, headers: dict[str, str], params: dict[str, str] | None = None
) -> list[dict]:
    """Every frame of an event stream that ends by itself, as {field: value}."""
    frames = []
    with client.stream("GET", path, headers=headers, params=params) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        current: dict = {}
        for line in response.iter_lines():
            if not line:
                if current:
                    frames.append(current)
                current = {}
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            current[field] = json.loads(value) if field == "data" else value
    return frames
