"""The Python SDK against a running fleet: real HTTP, real processes, no mocks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path

import pytest

from ampfleet import AsyncClient, Client
from ampfleet.core.roles import Role
from ampfleet.core.spec import Priority
from ampfleet.core.states import JobState
from ampfleet.sdk import (
    Conflict,
    EndFrame,
    EventFrame,
    Forbidden,
    Job,
    JobFrame,
    MetricsFrame,
    NotFound,
    ProgressFrame,
    RateLimited,
    SpecError,
    StateFrame,
    Unauthorized,
    ValidationFailed,
    WaitTimeout,
    flows,
)
from tests.sdk.cutting_proxy import CuttingProxy
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet
from tests.support.parked import PARKED, fleet_with_parked_project

pytestmark = pytest.mark.e2e

STEPS = 40
TRANSITIONS = ["QUEUED", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet_with_parked_project(tmp_path_factory.mktemp("sdk-fleet")) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def client(fleet: Fleet) -> Iterator[Client]:
    with Client(fleet.base_url, fleet.admin_key) as client:
        yield client


@pytest.fixture(scope="module")
def job(client: Client) -> Job:
    """One training job for the module, submitted and not waited for: the tests that run
    first watch it live, the others wait for its end."""
    spec = job_spec(name="sdk", stop={"max_steps": STEPS}, log_every_steps=1, eval_every_steps=20)
    return client.submit(spec)


def parked(name: str) -> dict[str, object]:
    return job_spec(project=PARKED, name=name)


def check_frames(frames: list[JobFrame]) -> None:
    """The frames of a whole run: every transition once, every metric point once, one end."""
    durable = [f for f in frames if isinstance(f, StateFrame | EventFrame)]
    ids = [f.event.id for f in durable]
    assert ids == sorted(set(ids))
    transitions = [f.event.to_state for f in frames if isinstance(f, StateFrame)]
    assert transitions == TRANSITIONS
    points = [(p.name, p.step) for f in frames if isinstance(f, MetricsFrame) for p in f.points]
    assert len(points) == len(set(points))
    assert sorted(step for name, step in points if name == "loss") == list(range(1, STEPS + 1))
    assert [type(f) for f in frames].count(EndFrame) == 1
    assert frames[-1] == EndFrame(id=frames[-1].id, state=JobState.SUCCEEDED)


def test_stream_events_stops_halfway_and_resumes_from_the_last_id(client: Client, job: Job) -> None:
    first: list[JobFrame] = []
    for frame in client.stream_events(job.id):
        first.append(frame)
        if sum(isinstance(f, StateFrame) for f in first) == 3:
            break  # closes the stream: QUEUED, SCHEDULED, STARTING seen
    assert first[-1].id
    rest = list(client.stream_events(job.id, last_event_id=first[-1].id))
    check_frames(first + rest)
    durable = [f.event for f in first + rest if isinstance(f, StateFrame | EventFrame)]
    assert durable == client.events(job.id)


def test_logs_follow_yields_lines_live_until_the_job_ends(client: Client, job: Job) -> None:
    followed = list(client.logs(job.id, follow=True))
    assert client.get(job.id).state is JobState.SUCCEEDED  # the follow ended with the job
    assert {line.rank for line in followed} == {0, 1}
    assert any(f"step {STEPS}/{STEPS}" in line.line for line in followed)
    everything = list(client.logs(job.id))
    assert [line.id for line in everything] == [line.id for line in followed]
    assert [line.id for line in client.logs(job.id, tail=2)] == [line.id for line in followed[-2:]]
    assert {line.rank for line in client.logs(job.id, rank=1)} == {1}


def test_submit_wait_get(client: Client, job: Job) -> None:
    assert job.state is JobState.QUEUED
    assert job.spec["hyperparameters"]["hidden"] == 256  # resolved by the server
    done = client.wait(job.id, timeout=180)
    assert done.state is JobState.SUCCEEDED
    assert done.progress.step == done.progress.total_steps == STEPS
    assert done.precision.effective == "bf16"
    assert done.finished_at is not None
    assert client.get(job.id) == done
    assert job.id in [j.id for j in client.list(state="SUCCEEDED")]
    assert job.id not in [j.id for j in client.list(state=[JobState.QUEUED, JobState.FAILED])]


def test_wait_times_out_with_the_job_as_last_seen(client: Client) -> None:
    queued = client.submit(parked("never-placed"))
    with pytest.raises(WaitTimeout) as caught:
        client.wait(queued.id, timeout=0.3, poll=0.1)
    assert caught.value.job.state is JobState.QUEUED
    assert queued.id in str(caught.value)


def test_list_goes_through_every_page(fleet: Fleet) -> None:
    with Client(fleet.base_url, fleet.admin_key) as paging:
        mine = [paging.submit(parked(f"page-{i}")).id for i in range(5)]
        paging.page_size = 2
        listed = [j.id for j in paging.list(project=PARKED)]
        assert [i for i in listed if i in mine] == mine[::-1]  # newest first, across 3+ pages
        assert len(list(paging.list(project=PARKED, limit=3))) == 3
        assert all(j.project == PARKED for j in paging.list(project=PARKED))


def test_idempotency_key_gives_the_same_job(client: Client) -> None:
    first = client.submit(parked("idem"), idempotency_key="sdk-idem-1")
    again = client.submit(parked("idem"), idempotency_key="sdk-idem-1")
    assert again.id == first.id
    with pytest.raises(ValidationFailed) as caught:
        client.submit(parked("other"), idempotency_key="sdk-idem-1")
    assert caught.value.fields == ["Idempotency-Key"]


def test_set_priority_then_cancel(client: Client) -> None:
    queued = client.submit({**parked("prio"), "priority": "low"})
    assert client.set_priority(queued.id, "high").priority is Priority.HIGH
    assert client.get(queued.id).priority is Priority.HIGH
    assert "priority_changed" in [e.reason for e in client.events(queued.id)]
    assert client.cancel(queued.id).state is JobState.CANCELLED
    assert client.wait(queued.id).state is JobState.CANCELLED
    with pytest.raises(Conflict):
        client.cancel(queued.id)
    with pytest.raises(Conflict):
        client.set_priority(queued.id, Priority.LOW)


def test_events_go_through_every_page(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    queued = client.submit({**parked("event-pages"), "priority": "low"})
    for priority in ("high", "normal", "low", "high"):  # submitted + 4 changes: 5 events
        client.set_priority(queued.id, priority)
    monkeypatch.setattr(flows, "EVENTS_PAGE", 2)  # 3 pages, the last one not full
    events = client.events(queued.id)
    assert [e.reason for e in events] == ["submitted", *["priority_changed"] * 4]
    assert [e.id for e in events] == sorted({e.id for e in events})
    assert client.events(queued.id, after=events[1].id) == events[2:]
    client.cancel(queued.id)


def test_metrics_series_and_downsampling(client: Client, job: Job) -> None:
    client.wait(job.id, timeout=180)
    history = client.metrics(job.id, names=["loss", "val_accuracy"])
    assert history.job_id == job.id
    series = {s.name: s for s in history.series}
    assert set(series) == {"loss", "val_accuracy"}
    loss = series["loss"]
    assert loss.steps == list(range(1, STEPS + 1))
    assert not loss.downsampled
    assert loss.summary.goal == "min"
    assert series["val_accuracy"].summary.goal == "max"
    (coarse,) = client.metrics(job.id, names="loss", max_points=10).series
    assert coarse.downsampled
    assert len(coarse.points) <= 10
    assert all(p.min is not None and p.max is not None for p in coarse.points)
    assert coarse.summary == loss.summary


def test_the_stream_takes_over_from_the_metrics_history(client: Client, job: Job) -> None:
    client.wait(job.id, timeout=180)
    history = client.metrics(job.id)
    assert history.last_metric_id > 0
    assert history.stream_cursor(7) == f"7:{history.last_metric_id}"
    # From no event on: every state change again, but not one of the points already read.
    replayed = list(client.stream_events(job.id, last_event_id=history.stream_cursor(0)))
    assert [f.event.to_state for f in replayed if isinstance(f, StateFrame)] == TRANSITIONS
    assert not [f for f in replayed if isinstance(f, MetricsFrame)]
    # From the last listed event on: nothing is left to send but where the job stands.
    cursor = history.stream_cursor(client.events(job.id)[-1].id)
    rest = list(client.stream_events(job.id, last_event_id=cursor))
    assert [type(f) for f in rest] == [ProgressFrame, EndFrame]
    assert rest[0].queue is None  # typed like JobOut.queue; set only while queued
    # Without a cursor the stream starts at the beginning, points included.
    assert any(isinstance(f, MetricsFrame) for f in client.stream_events(job.id))


def test_stream_resumes_by_itself_after_the_connection_drops(
    fleet: Fleet, client: Client, job: Job
) -> None:
    client.wait(job.id, timeout=180)
    proxy = CuttingProxy(fleet.port, cut_after_bytes=1500)
    try:
        with Client(proxy.url, fleet.admin_key) as through_proxy:
            frames = list(through_proxy.stream_events(job.id))
    finally:
        proxy.close()
    assert proxy.connections == 2  # cut mid-answer once, then resumed
    check_frames(frames)


def test_error_answers_raise_typed_exceptions(fleet: Fleet, client: Client, tmp_path: Path) -> None:
    with pytest.raises(NotFound) as not_found:
        client.get("job_nope")
    assert (not_found.value.status, not_found.value.code) == (404, "not_found")
    with Client(fleet.base_url, "amp_not_a_key") as stranger, pytest.raises(Unauthorized) as no:
        stranger.get("job_nope")
    assert (no.value.status, no.value.code) == (401, "unauthorized")
    with pytest.raises(ValidationFailed) as invalid:
        client.submit(job_spec(hyperparameters={"hidden": "wide"}))
    assert invalid.value.status == 422
    assert invalid.value.fields == ["hyperparameters.hidden"]
    # A spec that cannot be valid is refused before any request, with the same shape.
    with pytest.raises(SpecError) as local:
        client.submit(job_spec(resources={"nodes": 0}))
    assert local.value.fields == ["resources.nodes"]
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("recipe: digits\nstop: {max_steps: 0}\n")
    with pytest.raises(SpecError) as from_file:
        client.submit(spec_file)
    assert from_file.value.fields == ["stop"]  # a rule of the whole stop (with init_from)
    assert "max_steps 0 trains nothing" in str(from_file.value)


def test_url_and_key_default_to_the_environment_then_the_data_dirs_admin_key(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AMPFLEET_URL", fleet.base_url)
    monkeypatch.delenv("AMPFLEET_API_KEY", raising=False)
    monkeypatch.delenv("AMPFLEET_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with Client() as keyless, pytest.raises(Unauthorized):
        keyless.nodes()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "admin.key").write_text(fleet.admin_key + "\n")
    with Client() as from_file:
        assert (from_file.base_url, from_file.api_key) == (fleet.base_url, fleet.admin_key)
        assert from_file.nodes()
    # A server with a data folder of its own leaves its key there; so the client looks there.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "admin.key").write_text("amp_from_the_data_dir\n")
    monkeypatch.setenv("AMPFLEET_DATA_DIR", str(tmp_path / "elsewhere"))
    with Client() as from_data_dir:
        assert from_data_dir.api_key == "amp_from_the_data_dir"
    monkeypatch.setenv("AMPFLEET_API_KEY", "amp_from_the_environment")
    with Client() as from_environment:
        assert from_environment.api_key == "amp_from_the_environment"


def test_keys_create_list_revoke_and_nodes(fleet: Fleet, client: Client) -> None:
    created = client.keys.create(role=Role.READ, name="sdk-reader")  # or "read", as below
    assert created.key.startswith("amp_")
    with pytest.raises(ValueError, match="superuser"):
        client.keys.create(role="superuser")  # refused before any request
    # Each write is committed before its answer, so the next request sees it.
    assert {k.id: k for k in client.keys.list()}[created.id].role == "read"
    with Client(fleet.base_url, created.key) as reader:
        (node,) = reader.nodes()
        assert node.id == "node-a"
        assert node.alive
        with pytest.raises(Forbidden):
            reader.submit(parked("read-only"))
        client.keys.revoke(created.id)
        with pytest.raises(Unauthorized):
            reader.nodes()
    assert {k.id: k for k in client.keys.list()}[created.id].revoked_at is not None


def test_async_client_has_the_same_surface(fleet: Fleet, client: Client, job: Job) -> None:
    async def scenario() -> None:
        async with AsyncClient(fleet.base_url, fleet.admin_key) as aclient:
            done = await aclient.wait(job.id, timeout=180)
            assert done == client.get(job.id)
            assert await aclient.events(job.id) == client.events(job.id)
            async with aclosing(aclient.stream_events(job.id)) as frames:
                first = []
                async for frame in frames:
                    first.append(frame)
                    if len(first) == 2:
                        break
            async with aclosing(aclient.stream_events(job.id, first[-1].id)) as frames:
                rest = [frame async for frame in frames]
            check_frames(first + rest)
            lines = [line.id async for line in aclient.logs(job.id, follow=True)]
            assert lines == [line.id for line in client.logs(job.id)]
            history = await aclient.metrics(job.id, "loss")
            assert history == client.metrics(job.id, "loss")
            assert history.last_metric_id > 0

            queued = await aclient.submit(parked("async"), idempotency_key="async-1")
            again = await aclient.submit(parked("async"), idempotency_key="async-1")
            assert again.id == queued.id
            assert queued.id in [j.id async for j in aclient.list(project=PARKED)]
            assert (await aclient.set_priority(queued.id, "high")).priority is Priority.HIGH
            assert (await aclient.cancel(queued.id)).state is JobState.CANCELLED
            assert [node.id for node in await aclient.nodes()] == ["node-a"]

            created = await aclient.keys.create(role="read", name="async-reader")
            assert created.id in [k.id for k in await aclient.keys.list()]
            await aclient.keys.revoke(created.id)
            with pytest.raises(NotFound):
                await aclient.get("job_nope")

    asyncio.run(scenario())


def burst(client: Client, job_id: str, times: int) -> list[Job]:
    return [client.get(job_id) for _ in range(times)]


def test_embedded_fleet_with_rate_limited_retries(tmp_path: Path) -> None:
    """The embedded default (SQLite, file broker), with a rate limit of 4 requests/s a key:
    answers 429 are retried after their Retry-After, or raised when retries are off."""
    limits = {"AMPFLEET_RATE_LIMIT_PER_S": "4", "AMPFLEET_RATE_LIMIT_BURST": "4"}
    with (
        running_fleet(tmp_path / "fleet", "embedded", extra_env=limits) as fleet,
        Client(fleet.base_url, fleet.admin_key) as admin,
    ):
        job = admin.submit(job_spec(name="embedded"))
        assert admin.wait(job.id, timeout=180).state is JobState.SUCCEEDED
        key = admin.keys.create(role="read", name="burst").key
        impatient = Client(fleet.base_url, key, max_retries=0)
        impatient.get(job.id)  # the key works at once
        with pytest.raises(RateLimited) as caught:
            burst(impatient, job.id, 20)
        impatient.close()
        assert caught.value.status == 429
        assert (caught.value.retry_after or 0) >= 1
        with Client(fleet.base_url, key) as patient:  # starts with an empty bucket
            assert {job.state for job in burst(patient, job.id, 12)} == {JobState.SUCCEEDED}
