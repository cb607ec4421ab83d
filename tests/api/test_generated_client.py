"""A client generated from the app's OpenAPI document by openapi-python-client, used as
generated (not a line changed), against a real server on loopback: what a platform that
integrates by generating its client gets."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.factories import job_spec
from tests.support.live_api import serving

GENERATE_TIMEOUT_S = 300
PACKAGE = "ampfleet_client"


@pytest.fixture
def generated(app: FastAPI, tmp_path: Path) -> Iterator[Callable[[str], ModuleType]]:
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(app.openapi()))
    bin_dir = Path(sys.executable).parent  # the generator formats its output with ruff
    subprocess.run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(document),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / PACKAGE),
        ],
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=GENERATE_TIMEOUT_S,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield lambda name: importlib.import_module(f"{PACKAGE}.{name}")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_submit_poll_metrics_list_an_error_and_a_retry_through_the_generated_client(
    app: FastAPI, make_key: Callable[..., str], generated: Callable[[str], ModuleType]
) -> None:
    client_module = generated("client")
    models = generated("models")
    submit = generated("api.jobs.submit_job")
    get_job = generated("api.jobs.get_job")
    list_jobs = generated("api.jobs.list_jobs")
    list_events = generated("api.jobs.list_job_events")
    list_metrics = generated("api.metrics.list_job_metrics")
    spec: Any = models.JobSpec.from_dict(job_spec())
    with serving(app) as base_url:
        client = client_module.AuthenticatedClient(
            base_url=base_url, token=make_key(), raise_on_unexpected_status=True
        )
        with client:
            made = submit.sync_detailed(client=client, body=spec, idempotency_key="ci-41")
            assert made.status_code == 202
            job = made.parsed
            assert isinstance(job, models.JobOut)
            assert made.headers["Location"] == f"/v1/jobs/{job.id}"

            polled = get_job.sync(client=client, job_id=job.id)
            assert isinstance(polled, models.JobOut)
            assert polled.id == job.id
            events = list_events.sync(client=client, job_id=job.id)
            assert isinstance(events, models.EventList)
            metrics = list_metrics.sync(client=client, job_id=job.id)
            assert metrics is not None
            assert not isinstance(metrics, models.ErrorEnvelope)
            page = list_jobs.sync(client=client)
            assert isinstance(page, models.JobPage)
            assert [item.id for item in page.items] == [job.id]

            missing = get_job.sync_detailed(client=client, job_id="job_" + "0" * 26)
            assert missing.status_code == 404
            assert isinstance(missing.parsed, models.ErrorEnvelope)
            assert missing.parsed.error.code == "not_found"

            retry = submit.sync_detailed(client=client, body=spec, idempotency_key="ci-41")
            assert retry.status_code == 200
            assert isinstance(retry.parsed, models.JobOut)
            assert retry.parsed.id == job.id
