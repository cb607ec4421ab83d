"""/metrics as Prometheus tooling reads it: `promtool check metrics` finds nothing to say,
counters never go down across scrapes, node series do not churn, live streams stay out of
the request histogram, labels name what served a request, and the optional key."""

from __future__ import annotations

import itertools
import platform
import sys
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job, Node, utcnow
from ampfleet.core.settings import get_settings
from ampfleet.scheduler.loop import Scheduler
from ampfleet.workers.ingest import AttemptFeed, apply_records
from ampfleet.workers.rundir import RunDir
from tests.support.env import environment
from tests.support.factories import add_node, job_spec
from tests.support.prometheus import families, samples, scrape


def counter_samples(text: str) -> dict[str, float]:
    """Samples that must never decrease: counters, and histograms' buckets, counts, sums."""
    kinds = families(text)
    monotone = {name for name, kind in kinds.items() if kind == "counter"}
    monotone |= {
        name + suffix
        for name, kind in kinds.items()
        if kind == "histogram"
        for suffix in ("_bucket", "_count", "_sum")
    }
    return {key: value for key, value in samples(text).items() if key.split("{", 1)[0] in monotone}


def test_promtool_passes_and_counters_never_decrease(
    client: TestClient, anonymous: TestClient, tmp_path: Path
) -> None:
    add_node("n1", slots=4)
    scrapes = [scrape(anonymous)]
    jobs = [client.post("/v1/jobs", json=job_spec()).json() for _ in range(3)]
    scrapes.append(scrape(anonymous))
    assert Scheduler().run_pass() == 2  # two fit: two first placements observed
    scrapes.append(scrape(anonymous))
    with session_scope() as session:
        row = session.get(Job, jobs[0]["id"])
        assert row is not None
        records = [{"kind": "metrics", "step": s, "values": {"loss": 1.0 / s}} for s in (1, 2, 3)]
        apply_records(session, row, 1, records, AttemptFeed(RunDir(tmp_path)), get_settings())
    scrapes.append(scrape(anonymous))
    for job in jobs:  # the gauges go down; the counters must not
        client.post(f"/v1/jobs/{job['id']}/cancel")
    scrapes.append(scrape(anonymous))

    last = samples(scrapes[-1])
    assert last["ampfleet_metric_points_ingested_total"] == 3
    assert last["ampfleet_scheduling_latency_seconds_count"] == 2
    assert last['ampfleet_scheduling_latency_seconds_bucket{le="+Inf"}'] == 2
    assert families(scrapes[-1])["ampfleet_scheduling_latency_seconds"] == "histogram"
    for before, after in itertools.pairwise(scrapes):
        earlier, later = counter_samples(before), counter_samples(after)
        assert earlier.keys() <= later.keys()
        assert {k: v for k, v in earlier.items() if later[k] < v} == {}


def test_a_cordoned_node_changes_values_not_series(client: TestClient) -> None:
    add_node("n1", slots=4)
    before = samples(scrape(client))
    assert client.post("/v1/nodes/n1/cordon").status_code == 200
    after = samples(scrape(client))
    node = {k: v for k, v in before.items() if 'node="n1"' in k}
    assert node.keys() == {k for k in after if 'node="n1"' in k}
    assert node['ampfleet_node_slots{node="n1"}'] == 4
    assert node['ampfleet_node_up{node="n1"}'] == 1
    assert node['ampfleet_node_state{node="n1",state="ready"}'] == 1
    assert after['ampfleet_node_state{node="n1",state="ready"}'] == 0
    assert after['ampfleet_node_state{node="n1",state="cordoned"}'] == 1


def test_streams_stay_out_of_the_histogram_and_routes_are_named(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    client.post(f"/v1/jobs/{job['id']}/cancel")
    labels = 'method="GET",route="/v1/jobs/{job_id}/events"'
    served = f'ampfleet_http_requests_total{{{labels},status="200"}}'
    timed = f"ampfleet_http_request_duration_seconds_count{{{labels}}}"
    before = samples(scrape(client))  # the process's series: other tests' requests are in
    with client.stream(
        "GET", f"/v1/jobs/{job['id']}/events", headers={"Accept": "text/event-stream"}
    ) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        stream.read()  # the job is over: the stream ends
    client.get(f"/v1/jobs/{job['id']}/events")  # the listed page is an ordinary request
    for path in ("/docs", "/ui/", "/no/such/path"):
        client.get(path)
    text = scrape(client)
    after = samples(text)
    assert after[served] - before.get(served, 0) == 2
    assert after[timed] - before.get(timed, 0) == 1  # the page, not the stream
    assert 'route="/docs",status="200"' in text
    assert 'route="/ui/{path}",status="200"' in text
    assert 'route="unmatched",status="404"' in text
    assert 'route="unmatched",status="200"' not in text


def test_a_key_can_be_required(make_key, anonymous: TestClient) -> None:
    with environment({"AMPFLEET_METRICS_REQUIRE_KEY": "true"}):
        assert anonymous.get("/metrics").status_code == 401
        reader = {"Authorization": f"Bearer {make_key(role='read')}"}
        assert anonymous.get("/metrics", headers=reader).status_code == 403
        admin = {"Authorization": f"Bearer {make_key()}"}
        assert anonymous.get("/metrics", headers=admin).status_code == 200
    assert anonymous.get("/metrics").status_code == 200


def test_node_telemetry_is_a_series_per_node_and_fact(client: TestClient) -> None:
    """A live node's latest figures; a silent node's are zero (stale figures would look
    busy); GPU series only for GPU nodes, so none churns as jobs come and go."""
    add_node(
        "cpu-1",
        slots=2,
        accelerator="cpu",
        gpu_model=None,
        gpu_memory_mb=None,
        telemetry={"ranks": 2.0, "cpu_percent": 180.0, "rss_mb": 900.5},
    )
    add_node(
        "gpu-1",
        slots=8,
        accelerator="cuda",
        telemetry={"ranks": 1.0, "gpu_util_percent": 87.5, "gpu_memory_mb": 40_000.0},
    )
    add_node("gone", slots=2, telemetry={"ranks": 2.0, "cpu_percent": 150.0})
    with session_scope() as session:
        gone = session.get(Node, "gone")
        assert gone is not None
        gone.last_heartbeat_at = utcnow() - timedelta(hours=1)
    seen = samples(scrape(client))
    mb = 1024 * 1024
    assert seen['ampfleet_node_ranks{node="cpu-1"}'] == 2
    assert seen['ampfleet_node_cpu_cores_used{node="cpu-1"}'] == pytest.approx(1.8)
    assert seen['ampfleet_node_rank_memory_bytes{node="cpu-1"}'] == pytest.approx(900.5 * mb)
    assert seen['ampfleet_node_gpu_utilization_ratio{node="gpu-1"}'] == 0.875
    assert seen['ampfleet_node_gpu_memory_bytes{node="gpu-1"}'] == 40_000 * mb
    assert seen['ampfleet_node_cpu_cores_used{node="gpu-1"}'] == 0  # not reported: zero
    assert seen['ampfleet_node_cpu_cores_used{node="gone"}'] == 0
    assert not [k for k in seen if k.startswith("ampfleet_node_gpu_") and "cpu-1" in k]


def test_the_standard_process_and_python_series(client: TestClient) -> None:
    """As prometheus_client's default collectors name them, so stock dashboards and alerts
    for a Python process work: this process's own CPU, memory, descriptors, start, GC."""
    text = scrape(client)
    kinds = families(text)
    seen = samples(text)
    for name in (
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
        "python_info",
    ):
        assert kinds[name] == "gauge"
    for name in (
        "process_cpu_seconds_total",
        "python_gc_objects_collected_total",
        "python_gc_objects_uncollectable_total",
        "python_gc_collections_total",
    ):
        assert kinds[name] == "counter"
    assert seen["process_resident_memory_bytes"] > 10 * 1024 * 1024  # the API, not a stub
    assert seen["process_cpu_seconds_total"] > 0
    assert 0 < seen["process_open_fds"] <= seen["process_max_fds"]
    me = psutil.Process()
    assert seen["process_start_time_seconds"] == pytest.approx(me.create_time(), abs=1)
    assert seen["process_cpu_seconds_total"] <= sum(me.cpu_times()[:2]) + 0.1
    major, minor, micro = sys.version_info[:3]
    info = (
        f'python_info{{implementation="{platform.python_implementation()}",major="{major}",'
        f'minor="{minor}",patchlevel="{micro}",version="{platform.python_version()}"}}'
    )
    assert [k for k in seen if k.startswith("python_info{")] == [info]
    assert seen['python_gc_collections_total{generation="0"}'] >= 0
