"""The API's /metrics exposition as Prometheus reads it: scraped and checked with `promtool
check metrics` (Debian's prometheus package, `make metrics-deps`), and read back as its samples
(by name and labels) and its metric families' types."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: `make metrics-deps` installs Debian's prometheus")
    return found


def samples(text: str) -> dict[str, float]:
    """Every sample of an exposition, by name and labels."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, line
            out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


def families(text: str) -> dict[str, str]:
    return dict(line.split(" ")[2:4] for line in text.splitlines() if line.startswith("# TYPE "))


def scrape(api: TestClient) -> str:
    response = api.get("/metrics")
    assert response.status_code == 200, response.text
    check = subprocess.run(
        [promtool(), "check", "metrics"],
        input=response.text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (check.returncode, check.stdout + check.stderr) == (0, "")
    return response.text
