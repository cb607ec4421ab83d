"""The window between a submit's commit and its answer reaching the client: the API dies
after the job is committed, before the 202 leaves (a proxy holds the answer back, kills the
API, drops the connection). The client, having heard nothing, retries with its
Idempotency-Key once the API is back: it gets the same job, exactly one job exists, and it
runs once. On both configurations (SQLite holds the key's claim in the API process, PostgreSQL
in the transaction). (Long tier: real processes.)"""

from __future__ import annotations

import httpx
import pytest

from ampfleet.sdk.client import Client
from ampfleet.sdk.errors import ConnectionFailed
from tests.faults.answer_lost import AnswerLost
from tests.support.factories import job_spec
from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet, FleetFactory, transitions

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.mark.parametrize("configuration", FLEET_CONFIGURATIONS)
def test_a_submit_whose_answer_is_lost_after_the_commit_is_one_job(
    make_fleet: FleetFactory, configuration: str
) -> None:
    fleet = make_fleet(configuration)
    api = fleet.processes["api"]

    def kill_api() -> None:
        api.kill()
        api.wait(timeout=30)

    proxy = AnswerLost(fleet.port, kill_api)
    spec = job_spec(stop={"max_steps": 20})
    try:
        with Client(proxy.url, fleet.admin_key) as client:
            with pytest.raises(ConnectionFailed):
                client.submit(spec, idempotency_key="release-2024-11")
            # The API had committed the job and written its 202 when it died.
            assert proxy.lost.startswith(b"HTTP/1.1 202"), proxy.lost[:200]
            assert api.poll() is not None
            fleet.start_api()
            fleet.wait_until(lambda: _healthy(fleet), timeout=60, what="the API back")
            job = client.submit(spec, idempotency_key="release-2024-11")
    finally:
        proxy.close()
    assert f"location: /v1/jobs/{job.id}\r\n".encode() in proxy.lost.lower()  # the same job
    assert [j["id"] for j in fleet.http.get("/v1/jobs").json()["items"]] == [job.id]
    done = fleet.wait_for_state(job.id, {"SUCCEEDED"})
    assert done["attempt"] == 1, transitions(fleet, job.id)


def _healthy(fleet: Fleet) -> bool:
    try:
        return fleet.http.get("/healthz").status_code == 200
    except httpx.TransportError:  # not listening yet
        return False
