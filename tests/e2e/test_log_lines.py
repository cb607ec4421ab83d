"""`ampfleet up` writes JSON lines only: its own (the banner, the admin key's file) and those
of the api, scheduler and worker it starts, from start to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.logs import json_lines
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e
START_TIMEOUT_S = 120


def test_ampfleet_up_writes_json_lines_only(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        "AMPFLEET_DATABASE_URL": "",
        "AMPFLEET_BROKER_URL": "",
        "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        "AMPFLEET_API_PORT": str(port),
        "AMPFLEET_HEARTBEAT_INTERVAL_S": "1",
    }
    output = tmp_path / "up.log"
    with output.open("wb") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "ampfleet.cli", "up"],
            env=env,
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while b"ready: " not in output.read_bytes():  # the worker's node is up
                assert up.poll() is None, output.read_text()
                assert time.monotonic() < deadline, output.read_text()
                time.sleep(0.2)
            assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        finally:
            up.send_signal(signal.SIGTERM)
            up.wait(timeout=60)
    records = json_lines(output.read_text())
    assert {r["role"] for r in records} == {"up", "api", "scheduler", "worker"}
    said = [r["message"] for r in records if r["role"] == "up"]
    assert any(m.startswith(f"ampfleet up: API on http://127.0.0.1:{port}") for m in said)
    assert any(m.startswith("created an admin API key in ") for m in said)
    assert all("color_message" not in r for r in records)
