"""The API process lists recipes and takes a submit (and a sweep) without importing torch, any
training code or the sweep controller's Optuna: a fresh interpreter serves them and its
sys.modules is read afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRAINING_ONLY = ("torch", "ampfleet.workers.training", "optuna", "ampfleet.scheduler")

SERVE_THEN_LIST_MODULES = """
import json, sys
from fastapi.testclient import TestClient
from ampfleet.core.db import session_scope
from ampfleet.core.keys import create_key
from ampfleet.core.migrate import upgrade
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings
from ampfleet.api.app import create_app

SWEEP = {
    "base": {"recipe": "digits"},
    "space": {"learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 1e-1}},
    "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
    "budget": {"max_trials": 2},
}
upgrade()
with session_scope() as session:
    _, key = create_key(
        session, project="default", role=Role.ADMIN, name="t", pepper=get_settings().secret_key
    )
with TestClient(create_app()) as client:
    headers = {"Authorization": f"Bearer {key}"}
    statuses = [
        client.get("/v1/recipes", headers=headers).status_code,
        client.get("/v1/recipes/digits", headers=headers).status_code,
        client.post("/v1/jobs", json={"recipe": "digits"}, headers=headers).status_code,
        client.post("/v1/sweeps", json=SWEEP, headers=headers).status_code,
    ]
loaded = [m for m in sys.modules if m.startswith(TRAINING_ONLY)]
print(json.dumps({"statuses": statuses, "loaded": loaded}))
"""


def test_recipes_and_a_submit_are_served_without_torch(tmp_path: Path) -> None:
    env = {
        "AMPFLEET_DATA_DIR": str(tmp_path),
        "AMPFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'ampfleet.db'}",
        "AMPFLEET_BROKER_URL": "",
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        "PATH": "/usr/bin:/bin",
    }
    script = f"TRAINING_ONLY = {TRAINING_ONLY!r}\n" + SERVE_THEN_LIST_MODULES
    result = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer == {"statuses": [200, 200, 202, 202], "loaded": []}
