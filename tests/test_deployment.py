"""docker-compose.yml describes a real deployment: checked structurally, and by
`docker compose config` where the compose plugin is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_compose_has_every_role_with_health_gates() -> None:
    svc = services()
    assert set(svc) == {"postgres", "redis", "seaweedfs", "migrate", "api", "scheduler", "worker"}
    for name in ("postgres", "redis", "seaweedfs", "api"):
        assert "healthcheck" in svc[name], name
    assert svc["migrate"]["command"] == ["migrate"]
    for name in ("api", "scheduler", "worker"):
        depends = svc[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["redis"]["condition"] == "service_healthy"
    assert svc["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_api_healthcheck_probes_liveness() -> None:
    """A restarter acting on the container's health must not restart the API for a database
    outage: the check is /healthz (liveness), not /readyz."""
    check = " ".join(services()["api"]["healthcheck"]["test"])
    assert "/healthz" in check
    assert "/readyz" not in check


def test_api_and_worker_use_the_object_store() -> None:
    svc = services()
    for name in ("api", "worker"):
        env = svc[name]["environment"]
        # Defaults (the compose-managed SeaweedFS) that an operator may override.
        assert env["AMPFLEET_ARTIFACT_URL"] == "${AMPFLEET_ARTIFACT_URL:-s3://ampfleet/artifacts}"
        assert env["AMPFLEET_S3_ENDPOINT_URL"].endswith(":-http://seaweedfs:8333}"), name
        assert svc[name]["depends_on"]["seaweedfs"]["condition"] == "service_healthy", name
    # Only the processes that move artifacts hold the credentials.
    for name in ("migrate", "scheduler"):
        assert "AMPFLEET_S3_SECRET_ACCESS_KEY" not in svc[name]["environment"], name
    command = svc["seaweedfs"]["command"]
    assert "-master.telemetry=false" in command
    assert "-s3.config=/etc/seaweedfs/s3.json" in command
    assert svc["seaweedfs"]["configs"][0]["target"] == "/etc/seaweedfs/s3.json"


def test_worker_reserves_gpus() -> None:
    devices = services()["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]


def test_secrets_are_required_not_defaulted() -> None:
    text = COMPOSE.read_text()
    assert "${POSTGRES_PASSWORD:?" in text
    assert "${AMPFLEET_SECRET_KEY:?" in text
    assert "${AMPFLEET_S3_ACCESS_KEY_ID:?" in text
    assert "${AMPFLEET_S3_SECRET_ACCESS_KEY:?" in text
    env = services()["api"]["environment"]
    assert env["AMPFLEET_ENVIRONMENT"] == "production"


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="the docker compose plugin is not installed")
def test_docker_compose_config_validates() -> None:
    env = {
        **os.environ,
        "POSTGRES_PASSWORD": "x",
        "AMPFLEET_SECRET_KEY": "y",
        "AMPFLEET_S3_ACCESS_KEY_ID": "k",
        "AMPFLEET_S3_SECRET_ACCESS_KEY": "s",
    }
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
