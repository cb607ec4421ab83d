"""The API server process: its app leaves what start-up built out of the garbage collector's
walks (gc.freeze), and still serves (tests' own apps, create_app, freeze nothing); it keeps
idle connections longer than clients do."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.ports import free_port

PROBE = """
import gc, json
from fastapi.testclient import TestClient
from ampfleet.api.app import create_app, create_serving_app
create_app()
after_create_app = gc.get_freeze_count()
app = create_serving_app()
frozen = gc.get_freeze_count()
with TestClient(app) as client:
    status = client.get("/healthz").status_code
print(json.dumps({"create_app": after_create_app, "serving": frozen, "status": status}))
"""


def test_the_serving_app_freezes_start_up_objects_and_serves(tmp_path: Path) -> None:
    # The embedded default in a folder of its own: nothing of this session's servers.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPFLEET_")}
    env["AMPFLEET_DATA_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["create_app"] == 0
    assert seen["serving"] > 50_000  # the modules, routes and models start-up built
    assert seen["status"] == 200


def _request(conn: socket.socket) -> bytes:
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
        chunk = conn.recv(4096)
        if not chunk:
            return answer  # the server closed the connection
        answer += chunk
    return answer


def test_the_api_process_keeps_an_idle_connection_longer_than_clients_do(tmp_path: Path) -> None:
    """httpx keeps an idle connection 5 s, as uvicorn did by default: a request sent on one
    idle that long could meet the server's close ("Server disconnected without sending a
    response", seen in test fleets and benchmarks). `ampfleet api` keeps it 75 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPFLEET_")}
    env["AMPFLEET_DATA_DIR"] = str(tmp_path)
    port = free_port()
    subprocess.run([sys.executable, "-m", "ampfleet.cli", "migrate"], env=env, check=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "ampfleet.cli", "api", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        conn = None
        for _ in range(600):  # until it listens, at most a minute
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                time.sleep(0.1)
        assert conn is not None, "the API never listened"
        with conn:
            assert _request(conn).startswith(b"HTTP/1.1 200")
            time.sleep(6)  # idle past httpx's (and uvicorn's default) 5 s
            assert _request(conn).startswith(b"HTTP/1.1 200")
    finally:
        server.terminate()
        server.wait(timeout=30)
