"""Sweeps through the SDK, sync and async, against a live API (the controller's passes run in
the test): start, read, list, wait, cancel, the events listed and streamed; a trial's job
names its sweep and trial number."""

from __future__ import annotations

import asyncio
import threading
from contextlib import aclosing
from typing import Any

import pytest

from ampfleet import AsyncClient, Client
from ampfleet.sdk import NotFound, SpecError
from ampfleet.sdk.sweeps import SweepWaitTimeoutError
from tests.support.sdk_api import sweeps_api as api
from tests.support.sweeps import SPEC, finish_trials

__all__ = ["api"]  # the fixture: a live API and a write key


def test_a_sweep_from_start_to_end(api: dict[str, str]) -> None:
    with Client(api["url"], api["key"]) as client:
        started = client.sweep(SPEC)
        assert started["state"] == "RUNNING"
        with pytest.raises(SweepWaitTimeoutError):
            client.wait_sweep(started["id"], timeout=0.2, poll=0.05)
        finish_trials(started["id"])
        seen: list[str] = []
        done = client.wait_sweep(started["id"], on_poll=lambda s: seen.append(s["state"]))
        assert done["state"] == seen[-1] == "SUCCEEDED"
        assert done["best_trial"]["number"] == 1
        assert client.get_sweep(started["id"]) == done
        assert [s["id"] for s in client.sweeps()] == [started["id"]]
        events = client.sweep_events(started["id"])
        assert [e["type"] for e in events][-1] == "sweep.succeeded"
        assert client.sweep_events(started["id"], after=events[-2]["id"]) == events[-1:]
        frames = list(client.stream_sweep_events(started["id"]))
        assert [f["data"] for f in frames if f["kind"] == "event"] == events
        assert frames[-1]["kind"] == "end"
        resumed = list(client.stream_sweep_events(started["id"], last_event_id=frames[1]["id"]))
        assert [f["data"]["id"] for f in resumed if f["kind"] == "event"] == [
            e["id"] for e in events if e["id"] > int(frames[1]["id"])
        ]
        job = client.get(done["best_trial"]["job_id"])
        assert (job.sweep_id, job.trial) == (started["id"], 1)
        assert client.get(client.submit(SPEC["base"]).id).sweep_id is None
        with pytest.raises(SpecError):
            client.sweep({**SPEC, "budget": {"max_trials": 0}})


def test_the_async_client_has_the_same_sweeps(api: dict[str, str]) -> None:
    async def scenario() -> dict[str, Any]:
        async with AsyncClient(api["url"], api["key"]) as client:
            started = await client.sweep(SPEC)
            assert (await client.get_sweep(started["id"]))["id"] == started["id"]
            assert [s["id"] for s in await client.sweeps()] == [started["id"]]
            # The controller runs beside the client's stream, as a scheduler would.
            controller = threading.Thread(target=finish_trials, args=(started["id"],))
            controller.start()
            frames = []
            async with aclosing(client.stream_sweep_events(started["id"])) as stream:
                async for frame in stream:
                    frames.append(frame)
            controller.join()
            done = await client.wait_sweep(started["id"], timeout=30)
            assert done["state"] == "SUCCEEDED"
            events = await client.sweep_events(started["id"])
            assert [f["data"] for f in frames if f["kind"] == "event"] == events
            with Client(api["url"], api["key"]) as sync:
                assert done == sync.get_sweep(started["id"])
                assert events == sync.sweep_events(started["id"])
            again = await client.sweep(SPEC)
            cancelled = await client.cancel_sweep(again["id"])
            assert cancelled["state"] == "CANCELLED"
            with pytest.raises(NotFound):
                await client.get_sweep("swp_nope")
            return done

    done = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert done["best_trial"]["number"] == 1
