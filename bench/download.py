"""Download throughput of one big artifact: through the API against straight from the store.

    python -m bench.download [--size-mb 200] [--runs 7]

One object of `size-mb` random bytes is put into the S3 store on a private SeaweedFS and
listed as a job's artifact. Then, in each run, in turns (the order reversed every other run,
so a burst of load on the machine hits all alike), three readers fetch it and only count the
bytes:

- `direct`: boto3 `get_object`, read chunk by chunk, as the API itself reads the store;
- `api`: the API (`ampfleet api`, a real uvicorn process on loopback, PostgreSQL + Redis,
  API-key auth) read with urllib3, the HTTP library under boto3, so the two differ only by
  the API in the middle;
- `api-httpx`: the same download read with httpx, the SDK's HTTP library.

Figures: MB/s, the median over runs of each reader's ratio to `direct` in the same run; the
CPU seconds the store (SeaweedFS), the API process and this (client) process spent per
download; and the direct path's CPU total over each path's, the throughput ratio a machine
with no core to spare would see (the API adds a process to the pipeline: where cores are
short, as on a shared machine, the wall-clock ratio moves with the load; the CPU does not).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import urllib3

from ampfleet.core.artifacts import get_store, object_key
from ampfleet.core.artifacts.keys import CHUNK_SIZE
from ampfleet.core.db import session_scope
from ampfleet.core.keys import create_key
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings
from tests.support.env import environment, fresh_postgres_database
from tests.support.factories import job_spec, list_stored
from tests.support.fleet import FLEET_REDIS_DB, free_port
from tests.support.seaweedfs import S3Server, running_seaweedfs
from tests.support.services import services

BUCKET = "bench-download"
NAME = "model.safetensors"
START_TIMEOUT_S = 60.0


@contextmanager
def api_server(env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """`ampfleet api` on a free loopback port (its URL and pid); its log is shown if the
    benchmark fails."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ampfleet.cli", "api", "--port", str(port)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    httpx.get(f"{url}/openapi.json", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            yield url, process.pid
        except BaseException:
            log.seek(0)
            print(f"--- api (exit {process.poll()}):\n{log.read()[-5000:]}")
            raise
        finally:
            process.terminate()
            process.wait(timeout=20)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_running(fragment: str) -> int:
    """The pid of the process whose command line holds `fragment` (the store's data dir)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and proc.name != str(os.getpid()):
            try:
                if fragment.encode() in (proc / "cmdline").read_bytes():
                    return int(proc.name)
            except OSError:
                continue
    raise RuntimeError(f"no process runs with {fragment!r}")


def random_file(path: Path, size: int) -> Path:
    with path.open("wb") as out:
        for offset in range(0, size, CHUNK_SIZE):
            out.write(os.urandom(min(CHUNK_SIZE, size - offset)))
    return path


Reader = Callable[[], int]


def through_api_urllib3(url: str, key: str, job_id: str) -> Reader:
    pool = urllib3.PoolManager(headers={"Authorization": f"Bearer {key}"})

    def read() -> int:
        response = pool.request(
            "GET", f"{url}/v1/jobs/{job_id}/artifacts/{NAME}", preload_content=False
        )
        if response.status != 200:
            raise RuntimeError(f"download answered {response.status}")
        received = sum(len(chunk) for chunk in response.stream(CHUNK_SIZE))
        response.release_conn()
        return received

    return read


def through_api_httpx(url: str, key: str, job_id: str) -> Reader:
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def read() -> int:
        with client.stream("GET", f"/v1/jobs/{job_id}/artifacts/{NAME}") as response:
            response.raise_for_status()
            return sum(len(chunk) for chunk in response.iter_raw(CHUNK_SIZE))

    return read


def straight_from_store(s3: S3Server, prefix: str, sha256: str) -> Reader:
    client: Any = s3.client()
    name = f"{prefix}/{object_key(sha256)}"

    def read() -> int:
        body = client.get_object(Bucket=BUCKET, Key=name)["Body"]
        return sum(len(chunk) for chunk in body.iter_chunks(CHUNK_SIZE))

    return read


@dataclass
class Timings:
    seconds: list[float] = field(default_factory=list)
    store_cpu: list[float] = field(default_factory=list)
    api_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)

    def cpu(self) -> float:
        """Median CPU seconds of one download, all three processes together."""
        return statistics.median(
            map(sum, zip(self.store_cpu, self.api_cpu, self.client_cpu, strict=True))
        )


def timed(read: Reader, size: int, pids: dict[str, int], into: Timings) -> None:
    store_before, api_before = cpu_seconds(pids["store"]), cpu_seconds(pids["api"])
    client_before = time.process_time()
    started = time.perf_counter()
    received = read()
    into.seconds.append(time.perf_counter() - started)
    into.store_cpu.append(cpu_seconds(pids["store"]) - store_before)
    into.api_cpu.append(cpu_seconds(pids["api"]) - api_before)
    into.client_cpu.append(time.process_time() - client_before)
    if received != size:
        raise RuntimeError(f"read {received} bytes of {size}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    size = args.size_mb * 1_000_000

    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-download-")))
        s3 = stack.enter_context(running_seaweedfs(root / "seaweedfs"))
        s3.create_bucket(BUCKET)
        prefix = f"b{uuid.uuid4().hex[:8]}"
        env = {
            "AMPFLEET_ENVIRONMENT": "test",
            "AMPFLEET_SECRET_KEY": "bench-secret-not-for-production",
            "AMPFLEET_DATABASE_URL": stack.enter_context(fresh_postgres_database("ampfleet_bench")),
            "AMPFLEET_BROKER_URL": services().redis_url(
                FLEET_REDIS_DB
            ),  # keys of its own, as a fleet's
            "AMPFLEET_BROKER_KEY_PREFIX": f"ampfleet-bench-{prefix}:",
            "AMPFLEET_DATA_DIR": str(root / "var"),
            **s3.environment(BUCKET, prefix),
        }
        stack.enter_context(environment(env))
        with session_scope() as session:
            _, key = create_key(
                session,
                project="default",
                role=Role.ADMIN,
                name="bench",
                pepper=get_settings().secret_key,
            )
        stored = get_store().put_file(random_file(root / "object.bin", size))
        (root / "object.bin").unlink()
        url, api_pid = stack.enter_context(api_server(env))
        pids = {"api": api_pid, "store": pid_running(str(root / "seaweedfs" / "data"))}
        answer = httpx.post(
            f"{url}/v1/jobs", json=job_spec(), headers={"Authorization": f"Bearer {key}"}
        )
        answer.raise_for_status()
        job = answer.json()
        list_stored(job, stored, name=NAME, kind="model", step=0, attempt=1)

        readers = {
            "direct": straight_from_store(s3, prefix, stored.sha256),
            "api": through_api_urllib3(url, key, job["id"]),
            "api-httpx": through_api_httpx(url, key, job["id"]),
        }
        for read in readers.values():  # warm-up: connections, the filer's caches
            read()
        timings = {name: Timings() for name in readers}
        load_before = os.getloadavg()[0]
        print(f"{args.size_mb} MB object, S3 store on SeaweedFS, {args.runs} runs")
        for run in range(args.runs):
            order = list(readers) if run % 2 == 0 else list(reversed(readers))
            for name in order:
                timed(readers[name], size, pids, timings[name])
            print(
                f"  run {run + 1}: "
                + ", ".join(
                    f"{n} {size / 1e6 / t.seconds[-1]:.0f} MB/s" for n, t in timings.items()
                )
            )
        direct = timings["direct"]
        print(
            f"{'reader':10} {'MB/s':>6} {'vs direct':>9} {'store CPU':>9} {'API CPU':>8}"
            f" {'client CPU':>10} {'CPU vs direct':>13}"
        )
        for name, timing in timings.items():
            ratio = statistics.median(
                direct_s / reader_s
                for direct_s, reader_s in zip(direct.seconds, timing.seconds, strict=True)
            )
            print(
                f"{name:10} {size / 1e6 / statistics.median(timing.seconds):6.0f}"
                f" {ratio:8.2f}x {statistics.median(timing.store_cpu):8.2f}s"
                f" {statistics.median(timing.api_cpu):7.2f}s"
                f" {statistics.median(timing.client_cpu):9.2f}s"
                f" {direct.cpu() / timing.cpu():12.2f}x"
            )
        print(
            "target: api >= 0.7x of direct; load average (1 min) "
            f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores"
        )


if __name__ == "__main__":
    main()
