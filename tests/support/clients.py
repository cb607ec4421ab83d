"""In-process clients of the API app (FastAPI's TestClient) holding a key of the test's
choosing, beside conftest's `client` (an admin of `default`) and `anonymous`."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient


def keyed(app: FastAPI, key: str) -> TestClient:
    return TestClient(
        app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {key}"}
    )
