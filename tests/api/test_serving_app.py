"""The API server process's app leaves what start-up built out of the garbage collector's
walks (gc.freeze), and still serves; tests' own apps (create_app) freeze nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
