"""Celery's own tools against a real fleet on Redis: with AMPFLEET_CELERY_MONITORING the
workers answer `celery inspect ping`; every key the platform writes in Redis (broker queues,
kombu bindings, rate limits) starts with AMPFLEET_BROKER_KEY_PREFIX and its separator."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from ampfleet.core.messaging import make_celery
from ampfleet.core.settings import Settings
from tests.support.fleet import FleetFactory

pytestmark = pytest.mark.e2e


def test_monitoring_is_off_by_default_and_the_prefix_gets_a_separator() -> None:
    conf = make_celery(Settings(broker_url="redis://broker.invalid/0")).conf
    assert not conf.worker_enable_remote_control
    assert not conf.worker_send_task_events
    assert Settings(broker_key_prefix="clients").redis_key_prefix == "clients:"
    assert Settings(broker_key_prefix="clients.").redis_key_prefix == "clients."
    assert Settings().redis_key_prefix == ""


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_celery_inspect_sees_workers_and_every_key_is_prefixed(
    make_fleet: FleetFactory, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)  # this run's own database: nothing else in it
    client.flushdb()
    fleet = make_fleet(
        broker_url=redis_url,
        extra_env={"AMPFLEET_BROKER_KEY_PREFIX": "clients", "AMPFLEET_CELERY_MONITORING": "1"},
    )
    command = ["inspect", "ping", "--timeout", "5"]
    ping = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "ampfleet.workers.tasks", *command],
        env={**fleet.env, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert "pong" in ping.stdout
    assert fleet.http.get("/v1/jobs").status_code == 200  # a rate-limit bucket, for seconds
    keys = sorted(k.decode() for k in client.scan_iter(count=1000))
    assert keys
    assert [k for k in keys if not k.startswith("clients:")] == []
    assert any(k.startswith("clients:ampfleet:ratelimit:") for k in keys), keys
    assert any(k.startswith("clients:_kombu.binding.") for k in keys), keys
