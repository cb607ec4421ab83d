"""API throughput under concurrent clients: ours against a bare FastAPI app doing the same
database work (bench/bare_app.py), and against a bare echo endpoint for scale.

    python -m bench.api [--seconds 8] [--rounds 3] [--clients 20]

All run under uvicorn (one process, the same settings) on the same PostgreSQL database, ours
with Redis, API-key auth and its per-key rate limit; the same load generator drives each,
interleaved, in one run. Figures are medians over rounds: requests/s and p50/p99 latency of
POST /v1/jobs and GET /v1/jobs/{id}. The ratio that matters is ours / lean: the same
statements, so what is left is what ours adds. A request whose connection failed is counted
and printed at the end (not timed), and so is anything a server logged.
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

import httpx

from ampfleet.api.observability import nearest_rank
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
OURS = [*UVICORN, "--factory", "ampfleet.api.app:create_app"]


async def load(
    url: str,
    clients: int,
    seconds: float,
    request: Callable[[httpx.AsyncClient], object],
    headers: dict[str, str],
    failures: Counter[str] | None = None,
) -> tuple[float, float, float]:
    """(requests/s, p50 seconds, p99 seconds) of `clients` loops sending `request` for `seconds`.
    With `failures`, a request whose connection failed (the server closed it, say) is
    counted there by its error and the loop goes on; without, it ends the benchmark."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
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
    return (
        len(latencies) / elapsed,
        nearest_rank(latencies, 0.5),
        nearest_rank(latencies, 0.99),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    args = parser.parse_args()
    spec = job_spec(stop={"max_steps": 10})
    results: dict[str, list[tuple[float, float, float]]] = {}
    failures: defaultdict[str, Counter[str]] = defaultdict(Counter)
    with (
        api_environment() as (env, key),
        server(OURS, env) as ours_server,
        server([*UVICORN, "bench.bare_app:app"], env) as bare_server,
        server([*UVICORN, "bench.echo_app:app"], {}) as echo_server,
    ):
        ours, bare, echo = ours_server.url, bare_server.url, echo_server.url
        auth = {"Authorization": f"Bearer {key}"}
        job_id = httpx.post(ours + "/v1/jobs", json=spec, headers=auth).json()["id"]
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
            for name, (url, request, headers) in cases.items():
                results.setdefault(name, []).append(
                    asyncio.run(
                        load(url, args.clients, args.seconds, request, headers, failures[name])
                    )
                )
    print(
        f"{args.clients} concurrent clients, {args.seconds:g} s per case, "
        f"median of {args.rounds} rounds"
    )
    print(f"{'':10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    median = {
        n: tuple(statistics.median(r[i] for r in v) for i in range(3)) for n, v in results.items()
    }
    for name, (rate, p50, p99) in median.items():
        print(f"{name:10} {rate:>8.0f} {p50 * 1000:>8.1f} {p99 * 1000:>8.1f}")
    for verb in ("POST", "GET"):
        for baseline, what in (("bare", "what it needs, plainly"), ("lean", "ours' statements")):
            pairs = zip(results[f"{verb} ours"], results[f"{verb} {baseline}"], strict=True)
            rounds = [ours_round[0] / other[0] for ours_round, other in pairs]
            print(
                f"{verb}: ours / {baseline} ({what}) = "
                f"{median[f'{verb} ours'][0] / median[f'{verb} {baseline}'][0]:.2f}x requests/s"
                f" (rounds: {', '.join(f'{r:.2f}' for r in rounds)})"
            )
        print(f"{verb}: ours / echo = {median[f'{verb} ours'][0] / median[f'{verb} echo'][0]:.2f}x")
    for name, errors in failures.items():
        for error, count in errors.items():
            print(f"failed connections, {name}: {count} x {error}")


if __name__ == "__main__":
    main()
