"""Real api, scheduler and worker processes for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis
from sqlalchemy.orm import sessionmaker

from ampfleet.core.db import make_engine, unit_of_work
from ampfleet.core.keys import create_key
from ampfleet.core.migrate import upgrade
from ampfleet.core.private_files import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE
from ampfleet.core.roles import Role
from ampfleet.core.settings import EMBEDDED_DATABASE_FILE, embedded_database_url
from tests.support.env import fresh_postgres_database
from tests.support.ports import free_port
from tests.support.services import services

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}
FLEET_CONFIGURATIONS = ("postgres+redis", "embedded")
"""What a fleet runs on: PostgreSQL and Redis, or SQLite and broker files (`make run`)."""


class Fleet:
    """One API, one scheduler and N worker nodes, each a real `ampfleet` process."""

    def __init__(
        self,
        root: Path,
        *,
        database_url: str,
        broker_url: str,
        nodes: tuple[str, ...] = ("node-a",),
        start_schedulers: int = 1,
        cpu_slots: int = 2,
        extra_env: dict[str, str] | None = None,
        node_data_dirs: bool = False,
    ) -> None:
        """`node_data_dirs`: each worker gets its own data dir (runs, checkpoints) under
        `root/nodes/<node>`, as on separate hosts with no shared disk."""
        self.root = root
        self.node_data_dirs = node_data_dirs
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.node_names = nodes
        self.schedulers = start_schedulers
        self.env = {
            **os.environ,
            "AMPFLEET_ENVIRONMENT": "test",
            "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
            "AMPFLEET_DATABASE_URL": database_url,
            "AMPFLEET_BROKER_URL": broker_url,
            "AMPFLEET_DATA_DIR": str(root / "var"),
            "AMPFLEET_API_PORT": str(self.port),
            "AMPFLEET_NODE_CPU_SLOTS": str(cpu_slots),
            "AMPFLEET_HEARTBEAT_INTERVAL_S": "1",
            "AMPFLEET_SCHEDULER_POLL_S": "1",
            "AMPFLEET_TELEMETRY_INTERVAL_S": "0.5",  # several samples in a short job
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.answers: Counter[int] = Counter()
        """Every status the API answered this fleet's client, for the fault tests' tallies."""
        self.server_errors: list[str] = []
        """5xx answers other than a 503 with Retry-After (the one way an outage may answer)."""
        self.http = httpx.Client(
            base_url=self.base_url, timeout=30, event_hooks={"response": [self._tally]}
        )

    def _tally(self, response: httpx.Response) -> None:
        self.answers[response.status_code] += 1
        planned_outage = response.status_code == 503 and "retry-after" in response.headers
        if response.status_code >= 500 and not planned_outage:
            request = response.request
            self.server_errors.append(f"{request.method} {request.url.path} {response.status_code}")

    def tally(self) -> str:
        answered = ", ".join(f"{n} x {code}" for code, n in sorted(self.answers.items()))
        return f"answers: {answered}; 5xx other than 503 + Retry-After: {len(self.server_errors)}"

    # -- processes ------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "ampfleet.cli", *args],
            env=env or self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )

    def start_api(self) -> None:
        """The API process (again, after a test killed it), on the fleet's port."""
        self._spawn("api", ["api"])

    def start_scheduler(self, name: str) -> None:
        self._spawn(name, ["scheduler"])

    def start_worker(self, node: str) -> None:
        env = {**self.env, "AMPFLEET_NODE_NAME": node}
        if self.node_data_dirs:
            env["AMPFLEET_DATA_DIR"] = str(self.node_data_dir(node))
        self._spawn(f"worker-{node}", ["worker"], env)

    def node_data_dir(self, node: str) -> Path:
        return self.root / "nodes" / node if self.node_data_dirs else self.root / "var"

    def start(self) -> Fleet:
        self.root.mkdir(parents=True, exist_ok=True)
        self.admin_key = migrated_with_admin_key(self.env)
        self.http.headers["Authorization"] = f"Bearer {self.admin_key}"
        self.start_api()
        for index in range(self.schedulers):
            self._spawn("scheduler" if index == 0 else f"scheduler-{index + 1}", ["scheduler"])
        for node in self.node_names:
            self.start_worker(node)
        self.wait_until(self._ready, timeout=90, what="api up and every node alive")
        return self

    def _ready(self) -> bool:
        try:
            nodes = self.http.get("/v1/nodes").json()["items"]
        except (httpx.HTTPError, KeyError, ValueError):
            return False
        alive = {n["id"] for n in nodes if n["alive"]}
        return set(self.node_names) <= alive

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        self.processes[name].send_signal(sig)
        self.processes[name].wait(timeout=30)

    def stop(self) -> None:
        self.http.close()
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def logs(self, tail: int = 60) -> str:
        parts = []
        for name in self.processes:
            lines = (self.root / f"{name}.log").read_text(errors="replace").splitlines()
            parts.append(f"----- {name} -----\n" + "\n".join(lines[-tail:]))
        return "\n".join(parts)

    # -- API helpers ----------------------------------------------------------------------

    def wait_until(self, predicate: Any, *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def submit(self, spec: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        response = self.http.post("/v1/jobs", json=spec, **kwargs)
        assert response.status_code in (200, 202), response.text
        return dict(response.json())

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def wait_for_state(self, job_id: str, states: set[str], timeout: float = 180) -> dict[str, Any]:
        seen: list[str] = []

        def reached() -> bool:
            state = self.job(job_id)["state"]
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in TERMINAL and state not in states:
                raise AssertionError(
                    f"job {job_id} ended {state} (states seen {seen}): "
                    f"{self.job(job_id)['failure_reason']}\n{self.logs()}"
                )
            return state in states

        self.wait_until(reached, timeout=timeout, what=f"{job_id} to reach {states}")
        return self.job(job_id)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.http.get(f"/v1/jobs/{job_id}/events").json()["items"])


def database_url(env: dict[str, str]) -> str:
    """The database of the fleet whose environment is `env`, as its processes resolve it."""
    return env["AMPFLEET_DATABASE_URL"] or embedded_database_url(Path(env["AMPFLEET_DATA_DIR"]))


def migrated_with_admin_key(env: dict[str, str]) -> str:
    """What `ampfleet migrate` then `ampfleet bootstrap-key` do for a fleet of `env`, done in
    this process: each command, run as a process, spent nearly all of its second of CPU
    importing what this process has imported already (`python -m bench.fleet_cost`), and
    every fleet ran both. The commands themselves have tests of their own
    (tests/cli/test_cli_imports.py, tests/db)."""
    url = database_url(env)
    if not env["AMPFLEET_DATABASE_URL"]:  # the embedded default: private as the server makes it
        data_dir = Path(env["AMPFLEET_DATA_DIR"])
        data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        database = os.open(
            data_dir / EMBEDDED_DATABASE_FILE, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE
        )
        os.close(database)
    upgrade(url)
    engine = make_engine(url)
    try:
        with unit_of_work(sessionmaker(engine, expire_on_commit=False)) as session:
            _, key = create_key(
                session,
                project="default",
                role=Role.ADMIN,
                name="bootstrap",
                pepper=env["AMPFLEET_SECRET_KEY"],
            )
    finally:
        engine.dispose()
    return key


FleetFactory = Callable[..., Fleet]  # the make_fleet fixture (tests/conftest.py)


def fleet_cli(fleet: Fleet, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `ampfleet` command line of a user of `fleet`, run from `cwd`."""
    env = {**fleet.env, "AMPFLEET_URL": fleet.base_url, "AMPFLEET_API_KEY": fleet.admin_key}
    return subprocess.run(
        [sys.executable, "-m", "ampfleet.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def rank_processes(job_id: str) -> list[int]:
    """Pids whose command line mentions the job (its run folder): torchrun and ranks."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if job_id.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


FLEET_REDIS_DB = 14
"""The database index of the session's Redis that fleets share, each under a key prefix."""


@contextmanager
def running_fleet(
    root: Path,
    backend: str = "postgres+redis",
    *,
    database_url: str | None = None,
    broker_url: str | None = None,
    **kwargs: Any,
) -> Iterator[Fleet]:
    """A started fleet on "postgres+redis" (a fresh database, its own Redis key prefix, so
    fleets may run side by side) or "embedded" (SQLite and broker files under `root`);
    `database_url` and `broker_url` put it on servers of the caller's instead."""
    with ExitStack() as stack:
        if backend == "embedded" and not (database_url or broker_url):
            fleet = Fleet(root, database_url="", broker_url="", **kwargs)
        else:
            extra = dict(kwargs.pop("extra_env", {}))
            if broker_url is None:  # the session's Redis: keys of this fleet's own
                broker_url = services().redis_url(FLEET_REDIS_DB)
                prefix = f"ampfleet-test-{uuid.uuid4().hex[:8]}:"
                client = redis.Redis.from_url(broker_url)
                stack.callback(lambda: [client.delete(k) for k in client.scan_iter(f"{prefix}*")])
                extra["AMPFLEET_BROKER_KEY_PREFIX"] = prefix
            fleet = Fleet(
                root,
                database_url=database_url or stack.enter_context(fresh_postgres_database()),
                broker_url=broker_url,
                extra_env=extra,
                **kwargs,
            )
        stack.callback(fleet.stop)
        yield fleet.start()
        # No test of a fleet may see a 500: faults answer 503 with Retry-After, or nothing.
        assert fleet.server_errors == [], fleet.tally()


def fleet_per_module() -> Any:
    """`fleet = fleet_per_module()` in a test module: its tests share one fleet per
    configuration instead of starting one each (about 11 CPU-seconds to start and stop:
    `python -m bench.fleet_cost`). For tests that each run jobs of their own and look at
    those alone, never at the fleet's processes, its other jobs or its counters."""

    @pytest.fixture(scope="module", params=FLEET_CONFIGURATIONS, name="fleet")
    def shared(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[Fleet]:
        with running_fleet(tmp_path_factory.mktemp("fleet"), request.param) as fleet:
            yield fleet

    return shared


def placed_on(fleet: Fleet, job_id: str, attempt: int) -> list[str]:
    for event in fleet.events(job_id):
        if event["to_state"] == "SCHEDULED" and event["attempt"] == attempt:
            return re.findall(r"(node-\w+) x\d+", event["message"])
    raise AssertionError(f"attempt {attempt} of {job_id} was never placed")


def transitions(fleet: Fleet, job_id: str) -> list[tuple[str | None, str, str]]:
    return [
        (e["from_state"], e["to_state"], e["reason"])
        for e in fleet.events(job_id)
        if e["kind"] == "transition"
    ]


def losses(fleet: Fleet, job_id: str) -> list[tuple[int, float]]:
    """The job's loss series as (step, value) pairs."""
    metrics = fleet.http.get(f"/v1/jobs/{job_id}/metrics").json()
    (loss,) = [s["points"] for s in metrics["series"] if s["name"] == "loss"]
    return [(p["step"], p["value"]) for p in loss]


def start_message(fleet: Fleet, job_id: str) -> str:
    """The job's one start_phases event, as people read it (warm or cold, and why)."""
    (message,) = [e["message"] for e in fleet.events(job_id) if e["reason"] == "start_phases"]
    return str(message)


def start_phases(fleet: Fleet, job_id: str) -> list[dict[str, float]]:
    """Each start_phases event of the job, as seconds per phase (from its message)."""
    found = []
    for event in fleet.events(job_id):
        if event["reason"] == "start_phases":
            pairs = re.findall(r"([a-z][a-z ]*?) (\d+\.\d+) s", event["message"].split(": ")[1])
            found.append({name: float(seconds) for name, seconds in pairs})
    return found


def warm_sandbox_ready(fleet: Fleet, node: str = "node-a") -> bool:
    """Whether the node's worker holds a warm sandbox whose launcher finished its imports
    (a process deeper down, as a sandbox's uid)."""
    from ampfleet.workers.local_launcher import WARM_TITLE

    worker = psutil.Process(fleet.processes[f"worker-{node}"].pid)
    for process in worker.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            title = " ".join(process.cmdline())
            if title.startswith(f"{WARM_TITLE}, ready") and process.uids().real != 0:
                return True
    return False


def warm_launcher_ready(fleet: Fleet, node: str = "node-a") -> bool:
    """Whether the node's worker holds a warm launcher that finished its imports."""
    from ampfleet.workers.local_launcher import WARM_TITLE

    worker = fleet.processes[f"worker-{node}"].pid
    for child in psutil.Process(worker).children():
        with contextlib.suppress(psutil.Error):
            if " ".join(child.cmdline()).startswith(f"{WARM_TITLE}, ready"):
                return True
    return False
