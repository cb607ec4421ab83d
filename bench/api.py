"""API throughput under concurrent clients: ours against a bare FastAPI app doing the same
database work (bench/bare_app.py), and against a bare echo endpoint for scale.

    python -m bench.api [--seconds 8] [--rounds 3] [--clients 20]

All run under uvicorn (one process, the same settings) on the same PostgreSQL database, ours
with Redis, API-key auth and its per-key rate limit; the same load generator drives each,
interleaved, in one run. Figures are medians over rounds: requests/s and p50/p99 latency of
POST /v1/jobs and GET /v1/jobs/{id}. The ratio that matters is ours / lean: the same
statements, so what is left is what ours adds. Beside requests/s, each case's CPU time of the
server process per request (all its threads): on a shared machine requests/s follow the
share of the cores a server got, its CPU per request does not, so "requests per CPU second"
is the ratio that load moves least. A request whose connection failed is counted and
printed at the end (not timed), and so is anything a server logged.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import httpx

from ampfleet.api.observability import nearest_rank
from ampfleet.sdk.base import KEEPALIVE_EXPIRY_S
from tests.support.env import fresh_postgres_database
from tests.support.factories import job_spec
from tests.support.fleet import free_port
from tests.support.services import services


@dataclass(frozen=True)
class Server:
    url: str
    pid: int


@contextmanager
def server(args: list[str], env: dict[str, str]) -> Iterator[Server]:
    """A uvicorn process; its log is shown if the benchmark fails, and its errors (an
    exception in the application, a warning) after it stopped."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", *args, "--port", str(port)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        failed = False
        try:
            for _ in range(200):
                try:
                    httpx.get(url + "/openapi.json", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            yield Server(url, process.pid)
        except BaseException:
            failed = True
            raise
        finally:
            process.terminate()
            process.wait(timeout=20)
            log.seek(0)
            text = log.read()
            if failed or text.strip():
                print(f"--- {' '.join(args)} (exit {process.poll()}):\n{text[-5000:]}")


@contextmanager
def api_environment() -> Iterator[tuple[dict[str, str], str]]:
    """(the servers' environment, an admin key) on a fresh, migrated database with the
    rate limits out of the way (one key drives every client)."""
    with tempfile.TemporaryDirectory() as tmp, fresh_postgres_database("ampfleet_bench") as db:
        env = {
            "AMPFLEET_DATABASE_URL": db,
            "AMPFLEET_BROKER_URL": services().redis_url(13),
            "AMPFLEET_DATA_DIR": tmp,
            "AMPFLEET_RATE_LIMIT_PER_S": "1000000",
            "AMPFLEET_RATE_LIMIT_BURST": "1000000",
            "AMPFLEET_MAX_REQUESTS_IN_FLIGHT_PER_KEY": "1000000",  # one key, 20 clients
            "AMPFLEET_LOG_LEVEL": "WARNING",
        }
        subprocess.run(
            [sys.executable, "-m", "ampfleet.cli", "migrate"],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        key = subprocess.run(
            [sys.executable, "-m", "ampfleet.cli", "bootstrap-key"],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        yield env, key


UVICORN = ["uvicorn", "--log-level", "warning", "--no-access-log"]
OURS = [*UVICORN, "--factory", "ampfleet.api.app:create_serving_app"]  # as `ampfleet api` runs


async def load(
    url: str,
    clients: int,
    seconds: float,
    request: Callable[[httpx.AsyncClient], object],
    headers: dict[str, str],
    failures: Counter[str] | None = None,
) -> Load:
    """Requests/s, p50 and p99 seconds of `clients` loops sending `request` for `seconds`.
    With `failures`, a request whose connection failed (the server closed it, say) is
    counted there by its error and the loop goes on; without, it ends the benchmark."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(
        max_connections=clients,
        max_keepalive_connections=clients,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,  # the SDK's, under the server's keep-alive
    )
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=30
    ) as client:

        async def loop() -> None:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    response = await request(client)  # type: ignore[misc]
                except httpx.TransportError as exc:
                    if failures is None:
                        raise
                    failures[f"{type(exc).__name__}: {exc}"] += 1
                    continue
                assert response.status_code < 300, response.text
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return Load(
        len(latencies) / elapsed,
        nearest_rank(latencies, 0.5),
        nearest_rank(latencies, 0.99),
        len(latencies),
    )


def ratio(index: int, ours: tuple[float, ...], other: tuple[float, ...]) -> float:
    """Ours over the other in requests/s (index 0), or in requests per CPU second of the
    server (index 3: CPU per request, inverted)."""
    return ours[0] / other[0] if index == 0 else other[3] / ours[3]


class Load(NamedTuple):
    rate: float
    p50_s: float
    p99_s: float
    requests: int


def cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used (all its threads, user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(
    server: Server,
    clients: int,
    seconds: float,
    request: Callable[[httpx.AsyncClient], object],
    headers: dict[str, str],
    failures: Counter[str],
) -> tuple[float, float, float, float]:
    """load()'s requests/s, p50 and p99, and the server process's CPU milliseconds per
    request over it: what a request costs the server whatever share of the machine it got."""
    before = cpu_seconds(server.pid)
    result = asyncio.run(load(server.url, clients, seconds, request, headers, failures))
    used = cpu_seconds(server.pid) - before
    return result.rate, result.p50_s, result.p99_s, used * 1000 / max(result.requests, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    args = parser.parse_args()
    spec = job_spec(stop={"max_steps": 10})
    results: dict[str, list[tuple[float, float, float, float]]] = {}
    failures: defaultdict[str, Counter[str]] = defaultdict(Counter)
    with (
        api_environment() as (env, key),
        server(OURS, env) as ours_server,
        server([*UVICORN, "bench.bare_app:app"], env) as bare_server,
        server([*UVICORN, "bench.echo_app:app"], {}) as echo_server,
    ):
        ours, bare, echo = ours_server, bare_server, echo_server
        auth = {"Authorization": f"Bearer {key}"}
        job_id = httpx.post(ours.url + "/v1/jobs", json=spec, headers=auth).json()["id"]
        cases = {
            "POST ours": (ours, lambda c: c.post("/v1/jobs", json=spec), auth),
            "POST bare": (bare, lambda c: c.post("/bare/jobs", json=spec), auth),
            "POST lean": (bare, lambda c: c.post("/lean/jobs", json=spec), auth),
            "POST echo": (echo, lambda c: c.post("/echo", json=spec), {}),
            "GET ours": (ours, lambda c: c.get(f"/v1/jobs/{job_id}"), auth),
            "GET bare": (bare, lambda c: c.get(f"/bare/jobs/{job_id}"), auth),
            "GET lean": (bare, lambda c: c.get(f"/lean/jobs/{job_id}"), auth),
            "GET echo": (echo, lambda c: c.get(f"/echo/{job_id}"), {}),
        }
        for _ in range(args.rounds):
            for name, (target, request, headers) in cases.items():
                results.setdefault(name, []).append(
                    measured(target, args.clients, args.seconds, request, headers, failures[name])
                )
    print(
        f"{args.clients} concurrent clients, {args.seconds:g} s per case, "
        f"median of {args.rounds} rounds"
    )
    print(f"{'':10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/req':>11}")
    median = {
        n: tuple(statistics.median(r[i] for r in v) for i in range(4)) for n, v in results.items()
    }
    for name, (rate, p50, p99, cpu) in median.items():
        print(f"{name:10} {rate:>8.0f} {p50 * 1000:>8.1f} {p99 * 1000:>8.1f} {cpu:>11.2f}")
    for verb in ("POST", "GET"):
        for baseline, what in (("bare", "what it needs, plainly"), ("lean", "ours' statements")):
            for index, measure in ((0, "requests/s"), (3, "requests per CPU second")):
                pairs = zip(results[f"{verb} ours"], results[f"{verb} {baseline}"], strict=True)
                rounds = [ratio(index, ours, other) for ours, other in pairs]
                overall = ratio(index, median[f"{verb} ours"], median[f"{verb} {baseline}"])
                print(
                    f"{verb}: ours / {baseline} ({what}) = {overall:.2f}x {measure}"
                    f" (rounds: {', '.join(f'{r:.2f}' for r in rounds)})"
                )
        print(f"{verb}: ours / echo = {median[f'{verb} ours'][0] / median[f'{verb} echo'][0]:.2f}x")
    for name, errors in failures.items():
        for error, count in errors.items():
            print(f"failed connections, {name}: {count} x {error}")


if __name__ == "__main__":
    main()
