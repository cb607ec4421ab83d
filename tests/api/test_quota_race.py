"""The queue quota holds under concurrent submits: counting the queued jobs and inserting one
happen under the project's row lock (PostgreSQL; SQLite serialises writers anyway)."""

from __future__ import annotations

import threading
from collections import Counter

from fastapi.testclient import TestClient

from tests.support.factories import job_spec, row_counts

SUBMITTERS = 20
QUOTA = 3


def test_concurrent_submits_never_queue_past_the_quota(client: TestClient) -> None:
    assert client.put("/v1/projects/default", json={"max_queued_jobs": QUOTA}).status_code == 200
    start = threading.Barrier(SUBMITTERS, timeout=30)
    codes: list[int] = []

    def submit(index: int) -> None:
        start.wait()
        codes.append(client.post("/v1/jobs", json=job_spec(name=f"race-{index}")).status_code)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(SUBMITTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert Counter(codes) == {202: QUOTA, 429: SUBMITTERS - QUOTA}
    assert row_counts()["jobs"] == QUOTA
