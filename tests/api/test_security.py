"""Security properties: secrets, CORS, deserialisation, and what settings refuse."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from ampfleet.core.settings import DEFAULT_SECRET, Settings
from tests.support.env import environment
from tests.support.factories import job_spec

PACKAGE = Path(__file__).resolve().parents[2] / "ampfleet"


def test_default_secret_is_refused_outside_development() -> None:
    assert Settings(environment="development").secret_key == DEFAULT_SECRET
    for environment_name in ("test", "production"):
        with pytest.raises(ValidationError, match="AMPFLEET_SECRET_KEY"):
            Settings(environment=environment_name, secret_key=DEFAULT_SECRET)
    with pytest.raises(ValidationError, match="at least 16"):
        Settings(environment="production", secret_key="short")


def test_cors_is_off_unless_configured(backend: str, anonymous: TestClient) -> None:
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    response = anonymous.options("/v1/jobs", headers=preflight)
    assert "access-control-allow-origin" not in response.headers
    with environment({"AMPFLEET_CORS_ORIGINS": '["https://console.example"]'}):
        from ampfleet.api.app import create_app

        allowed = TestClient(create_app()).options(
            "/v1/jobs", headers={**preflight, "Origin": "https://console.example"}
        )
    assert allowed.headers["access-control-allow-origin"] == "https://console.example"


def test_secrets_never_reach_the_logs(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = client.post("/v1/keys", json={"project": "p1", "role": "write"}).json()["key"]
    holder = TestClient(client.app, headers={"Authorization": f"Bearer {key}"})
    holder.post("/v1/jobs", json=job_spec(project="p1"))
    holder.get("/v1/jobs", headers={"Authorization": "Bearer amp_wrong_guess"})
    secret_part = key.split("_", 2)[2]
    logged = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    assert caplog.records, "expected access log records"
    assert secret_part not in logged
    assert "amp_wrong_guess" not in logged


UNSAFE = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("marshal", "loads"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("dill", "loads"),
}


def _call_name(call: ast.Call) -> tuple[str, str] | str | None:
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        return call.func.value.id, call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def test_no_user_bytes_reach_unpickling() -> None:
    """Every torch.load passes weights_only=True; nothing calls pickle, unsafe YAML or eval."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            if name == ("torch", "load"):
                safe = any(
                    k.arg == "weights_only"
                    and isinstance(k.value, ast.Constant)
                    and k.value.value is True
                    for k in node.keywords
                )
                if not safe:
                    offenders.append(f"{path.name}:{node.lineno} torch.load without weights_only")
            elif name in UNSAFE or name in ("eval", "exec"):
                offenders.append(f"{path.name}:{node.lineno} {name}")
    assert offenders == []
