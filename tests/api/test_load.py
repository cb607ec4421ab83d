"""One key's load against a real API process on loopback: 200 live streams opened at once
and 100 clients sending requests back to back. Another tenant's GETs, sent meanwhile from a
process of their own, are all answered within BOUND_S, and no request answers 500 (the
database pool once starved: 500s after 30 s, for every tenant).

The other tenant runs in its own process so that its timings are the server's: sent from the
event loop that also drives the load, they measured mostly that loop (up to 11 s for a GET
the server answered in 0.3 s)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

import httpx
import pytest

from tests.support.env import fresh_postgres_database
from tests.support.factories import job_spec
from tests.support.fleet import free_port

pytestmark = pytest.mark.slow

STREAMS = 200
CLIENTS = 100
MOST_REQUESTS_PER_CLIENT = 200
OTHER_GETS = 30
IN_FLIGHT_PER_KEY = 8  # AMPFLEET_MAX_REQUESTS_IN_FLIGHT_PER_KEY's default
STREAMS_PER_KEY = 20  # AMPFLEET_MAX_STREAMS_PER_KEY's default
# The other tenant's slowest GET: 0.3-0.5 s measured on 2 shared cores at a load average of
# 20 (BENCHMARKS.md, "One key's burst and another tenant"); the margin is for that machine.
# Measured from the load's own event loop, as this test first did: 11 s.
BOUND_S = 3.0
START_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 300.0


@contextmanager
def api_process(root: Path, database_url: str, broker_url: str) -> Iterator[tuple[str, str]]:
    """An `ampfleet api` process; yields its base URL and an admin key."""
    port = free_port()
    env = {
        **os.environ,
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        "AMPFLEET_DATABASE_URL": database_url,
        "AMPFLEET_BROKER_URL": broker_url,
        "AMPFLEET_DATA_DIR": str(root / "var"),
        "AMPFLEET_API_PORT": str(port),
        # The per-key request rate is not what is under test: let the load reach the pool.
        "AMPFLEET_RATE_LIMIT_PER_S": "10000",
        "AMPFLEET_RATE_LIMIT_BURST": "10000",
    }
    root.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "ampfleet.cli"]
    subprocess.run([*cli, "migrate"], env=env, check=True, capture_output=True, cwd=root)
    admin = subprocess.run(
        [*cli, "bootstrap-key"], env=env, check=True, capture_output=True, text=True, cwd=root
    ).stdout.strip()
    with (root / "api.log").open("ab") as log:
        process = subprocess.Popen(
            [*cli, "api"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API did not start; see {root / 'api.log'}")
            time.sleep(0.2)
        yield base_url, admin
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture(params=["postgres", "sqlite"])
def api(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> Iterator[tuple]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'var' / 'ampfleet.db'}"
        with api_process(tmp_path, url, "") as served:
            yield served
        return
    with fresh_postgres_database() as url, api_process(tmp_path, url, redis_url) as served:
        yield served


async def open_stream(http: httpx.AsyncClient, path: str, key: str, hold: asyncio.Event) -> int:
    """Opens a stream, reads its first frame, holds it open until `hold` is set."""
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    async with http.stream("GET", path, headers=headers) as response:
        if response.status_code == 200:
            lines = response.aiter_lines()  # kept: a dropped one closes the connection
            await anext(lines)
            await hold.wait()
        return response.status_code


async def keep_sending(
    http: httpx.AsyncClient, paths: list[str], key: str, load: Load
) -> list[tuple[int, str | None]]:
    """One impatient client: requests back to back, 429 or not, until the load is over."""
    answers = []
    for number in range(MOST_REQUESTS_PER_CLIENT):
        if load.over.is_set():
            break
        response = await http.get(
            paths[number % len(paths)], headers={"Authorization": f"Bearer {key}"}
        )
        answers.append((response.status_code, response.headers.get("Retry-After")))
        if number == 0:
            load.one_more_client_sending()
    return answers


class Load:
    """Whether every client is sending (so the other tenant starts under the whole load),
    and whether the load is over."""

    def __init__(self) -> None:
        self.sending = 0
        self.all_sending = asyncio.Event()
        self.over = asyncio.Event()

    def one_more_client_sending(self) -> None:
        self.sending += 1
        if self.sending == CLIENTS:
            self.all_sending.set()


def other_tenant(base_url: str, key: str, ready: Event, go: Event, results: Queue) -> None:
    """In a process of its own: OTHER_GETS GETs one after another, once told to go."""
    timings = []
    with httpx.Client(base_url=base_url, timeout=60) as http:
        http.get("/healthz")  # connected before the load starts
        ready.set()
        if not go.wait(LOAD_TIMEOUT_S):
            return
        for _ in range(OTHER_GETS):
            started = time.perf_counter()
            response = http.get("/v1/jobs", headers={"Authorization": f"Bearer {key}"})
            timings.append((response.status_code, time.perf_counter() - started))
    results.put(timings)


async def run_load(base_url: str, admin: str) -> dict[str, list]:
    limits = httpx.Limits(max_connections=STREAMS + CLIENTS + 10)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as http:
        admin_headers = {"Authorization": f"Bearer {admin}"}
        keys = []
        for project in ("tenant-a", "tenant-b"):
            created = await http.post(
                "/v1/keys", json={"project": project, "role": "write"}, headers=admin_headers
            )
            keys.append(created.json()["key"])
        heavy, other = keys
        submitted = await http.post(
            "/v1/jobs", json=job_spec(), headers={"Authorization": f"Bearer {heavy}"}
        )
        assert submitted.status_code == 202, submitted.text
        job_path = f"/v1/jobs/{submitted.json()['id']}"
        context = multiprocessing.get_context("spawn")
        ready, go, results = context.Event(), context.Event(), context.Queue()
        process = context.Process(target=other_tenant, args=(base_url, other, ready, go, results))
        process.start()
        try:
            assert await asyncio.to_thread(ready.wait, START_TIMEOUT_S)
            hold, load = asyncio.Event(), Load()
            streams = [
                asyncio.create_task(open_stream(http, f"{job_path}/events", heavy, hold))
                for _ in range(STREAMS)
            ]
            paths = [job_path, "/v1/jobs", f"{job_path}/events", "/v1/queue"]
            clients = [
                asyncio.create_task(
                    keep_sending(http, paths[n % 4 :] + paths[: n % 4], heavy, load)
                )
                for n in range(CLIENTS)
            ]
            await load.all_sending.wait()
            go.set()
            others = await asyncio.to_thread(results.get, timeout=LOAD_TIMEOUT_S)
            load.over.set()
            answers = [answer for client in await asyncio.gather(*clients) for answer in client]
            hold.set()
            stream_codes = await asyncio.gather(*streams)
        finally:
            process.join(timeout=START_TIMEOUT_S)
            if process.is_alive():
                process.kill()
    return {"streams": stream_codes, "requests": answers, "others": others}


def test_one_keys_load_leaves_another_tenant_served(api: tuple[str, str]) -> None:
    base_url, admin = api
    outcome = asyncio.run(asyncio.wait_for(run_load(base_url, admin), timeout=LOAD_TIMEOUT_S))
    streams, requests, others = outcome["streams"], outcome["requests"], outcome["others"]
    seconds = [elapsed for _, elapsed in others]
    codes = [code for code, _ in requests]
    print(
        f"streams: {streams.count(200)} open, {streams.count(429)} refused; requests: "
        f"{ {code: codes.count(code) for code in sorted(set(codes))} }; other tenant's GETs: "
        f"max {max(seconds):.3f} s, p50 {statistics.median(seconds):.3f} s"
    )
    assert set(streams) <= {200, 429}, streams
    assert 1 <= streams.count(200) <= STREAMS_PER_KEY
    assert set(codes) <= {200, 429, 503}, requests
    assert codes.count(200) >= IN_FLIGHT_PER_KEY  # refused past the cap, not refused all
    assert all(int(retry_after) >= 1 for code, retry_after in requests if code == 429)
    assert [code for code, _ in others] == [200] * OTHER_GETS
    assert max(seconds) < BOUND_S
