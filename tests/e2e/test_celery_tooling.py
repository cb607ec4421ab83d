"""Celery's own tools against a real fleet on Redis: with AMPFLEET_CELERY_MONITORING the
workers answer `celery inspect ping` through the monitoring app, which a host with only
`ampfleet[broker]` installed loads (no torch, no database, no training code); every task a
monitor sees finishes (a wake-up of the scheduler is no task, so nothing stays PENDING) and
none keeps a result; every key the platform writes in Redis (broker queues, kombu bindings,
rate limits) starts with AMPFLEET_BROKER_KEY_PREFIX and its separator."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from kombu.message import Message

from ampfleet.core import messaging
from ampfleet.core.celery_config import START_ATTEMPT, WAKE_SCHEDULER_QUEUE, make_celery
from ampfleet.core.settings import Settings
from tests.support.celery_events import wait_for, watching
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.fleet import FleetFactory
from tests.support.installs import ROOT, in_venv, installed_venv

pytestmark = pytest.mark.e2e

MONITORING_APP = "ampfleet.core.celery_monitoring"
# What a monitoring host must not need: the worker's packages, the database's, the API's.
NOT_FOR_MONITORING = ("torch", "numpy", "sklearn", "sqlalchemy", "psycopg", "fastapi")
PROBE = f"""
import importlib.util, json, sys
import {MONITORING_APP} as monitoring
conf = monitoring.app.conf
print(json.dumps({{
    "loaded": sorted(
        m for m in sys.modules
        if m.split(".")[0] in {NOT_FOR_MONITORING!r}
        or m.startswith(("ampfleet.workers", "ampfleet.scheduler", "ampfleet.api"))
    ),
    "installed": [m for m in {NOT_FOR_MONITORING!r} if importlib.util.find_spec(m)],
    "tasks": sorted(t for t in monitoring.app.tasks if t.startswith("ampfleet.")),
    "conf": [conf.broker_url, conf.broker_transport_options, conf.worker_send_task_events],
    "file": monitoring.__file__,
}}))
"""


def monitoring_env(broker_url: str, prefix: str) -> dict[str, str]:
    return {
        "AMPFLEET_BROKER_URL": broker_url,
        "AMPFLEET_BROKER_KEY_PREFIX": prefix,
        "AMPFLEET_CELERY_MONITORING": "true",
    }


def expected_conf(broker_url: str, prefix: str) -> list[object]:
    """The fleet's own configuration under the same settings, as the probe prints it."""
    conf = make_celery(
        Settings(broker_url=broker_url, broker_key_prefix=prefix, celery_monitoring=True)
    ).conf
    return json.loads(
        json.dumps([conf.broker_url, conf.broker_transport_options, conf.worker_send_task_events])
    )


def inspect_ping(
    venv: Path, env: dict[str, str], *, timeout_s: int
) -> subprocess.CompletedProcess[str]:
    """`celery inspect ping` as a monitoring host runs it."""
    command = ["-m", "celery", "-A", MONITORING_APP, "inspect", "ping", "--timeout", str(timeout_s)]
    return in_venv(venv, "python", *command, env=env)


@pytest.fixture(scope="module")
def broker_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A monitoring host: ampfleet with the broker extra and nothing else."""
    return installed_venv(tmp_path_factory.mktemp("broker-alone"), {"broker"})


def test_monitoring_is_off_by_default_and_the_prefix_gets_a_separator() -> None:
    conf = make_celery(Settings(broker_url="redis://broker.invalid/0")).conf
    assert not conf.worker_enable_remote_control
    assert not conf.worker_send_task_events
    assert Settings(broker_key_prefix="clients").redis_key_prefix == "clients:"
    assert Settings(broker_key_prefix="clients.").redis_key_prefix == "clients."
    assert Settings().redis_key_prefix == ""


def test_the_monitoring_app_imports_no_training_code(tmp_path: Path) -> None:
    """Here torch and the rest are installed: the app must not import them."""
    broker_url = "redis://broker.invalid/0"
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,  # no .env of a checkout
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **monitoring_env(broker_url, "c")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    shown = json.loads(probe.stdout)
    assert Path(shown["file"]).is_relative_to(ROOT)
    assert "torch" in shown["installed"]  # so that its absence below means something
    assert shown["loaded"] == []
    assert shown["tasks"] == []
    assert shown["conf"] == expected_conf(broker_url, "c")


def test_the_monitoring_app_needs_only_the_broker_extra(broker_venv: Path, redis_url: str) -> None:
    env = monitoring_env(redis_url, f"empty{uuid.uuid4().hex[:8]}")
    probe = in_venv(broker_venv, "python", "-c", PROBE, env=env)
    assert probe.returncode == 0, probe.stderr
    shown = json.loads(probe.stdout)
    assert (shown["installed"], shown["loaded"]) == ([], [])
    assert Path(shown["file"]).is_relative_to(broker_venv)  # the wheel, not this checkout
    # The CLI loads the app and asks the broker; no worker listens under this prefix.
    ping = inspect_ping(broker_venv, env, timeout_s=1)
    assert "Traceback" not in ping.stdout + ping.stderr
    assert "No nodes replied" in ping.stdout + ping.stderr, ping.stdout + ping.stderr


def test_a_wake_up_reaches_the_scheduler_and_leaves_no_task_behind(redis_url: str) -> None:
    """A wake-up's only reader takes it off the scheduler's queue; sent as a task, it stood
    in Flower as PENDING for ever, since no Celery worker ever reports on it."""
    woken: list[object] = []

    def on_wake(body: object, message: Message) -> None:
        woken.append(body)
        message.ack()

    with environment(monitoring_env(redis_url, f"wake{uuid.uuid4().hex[:8]}")):
        app = messaging.get_celery()
        with watching(app) as state, app.connection_for_read() as connection:
            messaging._send_wake()  # what wake_scheduler runs off the caller's thread
            with connection.Consumer([WAKE_SCHEDULER_QUEUE], callbacks=[on_wake], accept=["json"]):
                connection.drain_events(timeout=10)
            assert woken == [{}]
            # A task sent after it: once its sent event is in, any event of the wake-up is.
            app.send_task(START_ATTEMPT, kwargs={}, queue=f"nobody-{uuid.uuid4().hex[:8]}")
            wait_for(lambda: bool(state.tasks), "the task's sent event")
        assert [(t.name, t.state) for t in state.tasks.values()] == [(START_ATTEMPT, "PENDING")]


def test_no_task_keeps_a_result() -> None:
    """Every task's outcome is in the database; a result backend would hold what no one
    reads."""
    from ampfleet.workers.tasks import celery_app

    ours = {name: task for name, task in celery_app.tasks.items() if name.startswith("ampfleet.")}
    assert set(ours) == {START_ATTEMPT}
    assert all(task.ignore_result for task in ours.values())
    assert not celery_app.conf.result_backend


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_celery_tools_on_the_broker_extra_see_the_fleet_and_every_key_is_prefixed(
    make_fleet: FleetFactory, redis_url: str, broker_venv: Path
) -> None:
    client = redis.Redis.from_url(redis_url)  # this run's own database: nothing else in it
    client.flushdb()
    env = monitoring_env(redis_url, "clients")
    fleet = make_fleet(broker_url=redis_url, extra_env=env)
    ping = inspect_ping(broker_venv, env, timeout_s=5)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert "pong" in ping.stdout

    monitor = make_celery(
        Settings(broker_url=redis_url, broker_key_prefix="clients", celery_monitoring=True)
    )
    with watching(monitor) as state:
        job = fleet.submit(job_spec())  # the API wakes the scheduler; the ranks' end does too
        fleet.wait_for_state(job["id"], {"SUCCEEDED"})
        wait_for(
            lambda: any(t.state == "SUCCESS" for t in state.tasks.values()),
            "the start task's success event",
        )
    assert [(t.name, t.state) for t in state.tasks.values()] == [(START_ATTEMPT, "SUCCESS")]

    assert fleet.http.get("/v1/jobs").status_code == 200  # a rate-limit bucket, for seconds
    keys = sorted(k.decode() for k in client.scan_iter(count=1000))
    assert keys
    assert [k for k in keys if not k.startswith("clients:")] == []
    assert any(k.startswith("clients:ampfleet:ratelimit:") for k in keys), keys
    assert any(k.startswith("clients:_kombu.binding.") for k in keys), keys
