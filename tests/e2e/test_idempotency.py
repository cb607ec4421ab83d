"""Idempotent submit under concurrency, against a real API process: 50 identical requests at
once with one Idempotency-Key make exactly one job."""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.factories import job_spec
from tests.support.fleet import Fleet, FleetFactory

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_fifty_concurrent_identical_submits_make_one_job(fleet: Fleet) -> None:
    spec = job_spec(stop={"max_steps": 5})
    headers = {"Idempotency-Key": "ci-build-1234", **fleet.http.headers}

    def submit(_: int) -> tuple[int, str]:
        with httpx.Client(base_url=fleet.base_url, timeout=60) as client:
            # 409 while the first is in flight, 429 past the key's requests in flight:
            # retry as it says.
            for _ in range(20):
                response = client.post("/v1/jobs", json=spec, headers=headers)
                if response.status_code not in (409, 429):
                    break
                time.sleep(float(response.headers["Retry-After"]))
            assert response.status_code in (200, 202), (response.status_code, response.text)
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


def test_a_retry_is_answered_while_another_writer_holds_the_sqlite_database(
    make_fleet: FleetFactory,
) -> None:
    """SQLite has one write lock: a retried submit reads its earlier answer without it, so a
    burst of retries never queues behind the writers (it did, and timed out under load)."""
    fleet = make_fleet("embedded")
    spec = job_spec(stop={"max_steps": 5})
    headers = {"Idempotency-Key": "retry-under-lock", **fleet.http.headers}
    first = fleet.http.post("/v1/jobs", json=spec, headers=headers)
    assert first.status_code == 202
    writer = sqlite3.connect(fleet.root / "var" / "ampfleet.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # takes the write lock and keeps it
    try:
        retry = fleet.http.post("/v1/jobs", json=spec, headers=headers)
        changed = fleet.http.post("/v1/jobs", json=job_spec(stop={"max_steps": 6}), headers=headers)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert retry.status_code == 200, retry.text
    assert retry.json()["id"] == first.json()["id"]
    assert retry.headers["Location"] == f"/v1/jobs/{first.json()['id']}"
    assert changed.status_code == 422  # another body under the same key: refused, unlocked too
