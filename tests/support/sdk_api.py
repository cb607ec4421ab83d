"""The API served over real HTTP to the SDK's and the CLI's clients, in this process (uvicorn
on loopback) so that the test's database and artifact store are the API's: `serving`, and the
live-API fixtures that SDK and CLI test modules share. Each fixture is named `api` (a module
takes the one it needs: `from tests.support.sdk_api import recipes_api as api`) and yields the
base URL and a key: `downloads_api` a read key of a job's project, the job holding a model
(BLOB), its manifest (MANIFEST) and a checkpoint; `recipes_api` a read key; `sweeps_api` a
write key of `default`. (live_api.serving is the server of the API's own stream and pool
tests: it also cuts open streams at the end.)"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from ampfleet import Client
from tests.conftest import KeyFactory
from tests.support.factories import add_artifact, job_spec
from tests.support.fleet import free_port

BLOB = os.urandom(5 * 1024 * 1024 + 3)
SHA = hashlib.sha256(BLOB).hexdigest()
MANIFEST = b'{"format": 1}'


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """uvicorn on loopback in this process, so the test's database and store are the API's."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture(name="api")
def downloads_api(app: FastAPI, make_key: KeyFactory, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A live API; a job with a model, its manifest and a checkpoint; a read key of its project."""
    with serving(app) as base_url, Client(base_url, make_key("alpha", "write")) as writer:
        job = writer.submit(job_spec()).model_dump(mode="json")
        add_artifact(tmp_path, job, "model.safetensors", "model", BLOB, 20)
        add_artifact(tmp_path, job, "manifest.json", "model", MANIFEST, 20)
        add_artifact(tmp_path, job, "checkpoint-000000020", "checkpoint", BLOB[:70000], 20)
        yield {"url": base_url, "key": make_key("alpha", "read"), "job_id": job["id"]}


@pytest.fixture(name="api")
def recipes_api(app: FastAPI, make_key: KeyFactory) -> Iterator[dict[str, Any]]:
    """A live API and a read key: reading recipes needs no more."""
    with serving(app) as base_url:
        yield {"url": base_url, "key": make_key("alpha", "read")}


@pytest.fixture(name="api")
def sweeps_api(app: FastAPI, make_key: KeyFactory) -> Iterator[dict[str, str]]:
    """A live API and a write key of project `default`."""
    with serving(app) as base_url:
        yield {"url": base_url, "key": make_key("default", "write")}
