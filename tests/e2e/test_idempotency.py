"""Idempotent submit under concurrency, against a real API process: 50 identical requests at
once with one Idempotency-Key make exactly one job."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.factories import job_spec
from tests.support.fleet import Fleet

pytestmark = pytest.mark.e2e


def test_fifty_concurrent_identical_submits_make_one_job(fleet: Fleet) -> None:
    spec = job_spec(stop={"max_steps": 5})
    headers = {"Idempotency-Key": "ci-build-1234", **fleet.http.headers}

    def submit(_: int) -> tuple[int, str]:
        with httpx.Client(base_url=fleet.base_url, timeout=60) as client:
            response = client.post("/v1/jobs", json=spec, headers=headers)
            return response.status_code, response.json()["id"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(submit, range(50)))
    codes = sorted(code for code, _ in answers)
    assert {job_id for _, job_id in answers} == {answers[0][1]}
    assert codes.count(202) == 1
    assert codes.count(200) == 49
    assert len(fleet.http.get("/v1/jobs").json()["items"]) == 1
    other = fleet.http.post("/v1/jobs", json=job_spec(stop={"max_steps": 6}), headers=headers)
    assert other.status_code == 422
