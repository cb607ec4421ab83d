"""The SDK's profiles against a real uvicorn, both clients: request, refuse a second, wait,
cancel, list, and download a done profile's files (verified); the ranks' side is played by
the records the node agent would store (core.profiles)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from ampfleet import AsyncClient, Client
from ampfleet.core import profiles
from ampfleet.core.artifact_names import PROFILE_KIND
from ampfleet.core.db import session_scope
from ampfleet.core.profile_states import ProfileState
from ampfleet.core.states import JobState
from ampfleet.sdk import Conflict, ProfileTimeout
from tests.conftest import KeyFactory
from tests.support.factories import add_artifact, insert_job
from tests.support.sdk_api import serving

SUMMARY = {"steps": 2, "start_step": 11, "end_step": 12, "ranks": {}}
TRACE = json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 1}]})


def _captured(tmp_path: Path, job_id: str, profile_id: str) -> list[str]:
    """What the ranks and the node would have done: report the capture, store its files."""
    names = [f"profiles/{profile_id}/rank-0.trace.json", f"profiles/{profile_id}/summary.json"]
    job = {"id": job_id, "project": "default"}
    with session_scope() as session:
        profiles.apply_report(
            session,
            {
                "profile_id": profile_id,
                "state": "uploading",
                "start_step": 11,
                "end_step": 12,
                "artifacts": names,
                "summary": SUMMARY,
            },
        )
    add_artifact(tmp_path, job, names[0], PROFILE_KIND, TRACE.encode(), None)
    add_artifact(tmp_path, job, names[1], PROFILE_KIND, json.dumps(SUMMARY).encode(), None)
    with session_scope() as session:
        profiles.artifact_listed(session, names[1])
    return names


def test_request_wait_and_download(app: FastAPI, make_key: KeyFactory, tmp_path: Path) -> None:
    job_id = insert_job(state=JobState.RUNNING)
    with serving(app) as url, Client(url, make_key()) as client:
        asked = client.profile(job_id, steps=2, ranks=[0])
        assert (asked.state, asked.ranks, asked.is_final) == (ProfileState.REQUESTED, [0], False)
        with pytest.raises(Conflict, match=asked.id):
            client.profile(job_id)
        with pytest.raises(ProfileTimeout) as waited:
            client.wait_profile(job_id, asked.id, timeout=0.2, poll=0.05)
        assert waited.value.profile.state is ProfileState.REQUESTED
        with pytest.raises(Conflict, match="only a done profile"):
            client.download_profile(job_id, asked.id, to=tmp_path / "out")

        names = _captured(tmp_path, job_id, asked.id)
        seen: list[ProfileState] = []
        done = client.wait_profile(job_id, asked.id, on_poll=lambda p: seen.append(p.state))
        assert (done.state, done.summary, seen[-1]) == (ProfileState.DONE, SUMMARY, done.state)
        paths = client.download_profile(job_id, asked.id, to=tmp_path / "out")
        assert paths == [tmp_path / "out" / name for name in names]
        assert paths[0].read_text() == TRACE
        assert client.get_profile(job_id) == done

        again = client.profile(job_id)
        assert client.cancel_profile(job_id).state is ProfileState.CANCELLED
        assert [p.id for p in client.profiles(job_id)] == [again.id, asked.id]


def test_the_async_client_has_the_same_surface(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    job_id = insert_job(state=JobState.RUNNING)

    async def scenario(url: str, key: str) -> dict[str, Any]:
        async with AsyncClient(url, key) as client:
            asked = await client.profile(job_id, steps=3, record_shapes=True)
            names = _captured(tmp_path, job_id, asked.id)
            done = await client.wait_profile(job_id, asked.id, poll=0.05)
            paths = await client.download_profile(job_id, asked.id, to=tmp_path / "a")
            latest = await client.get_profile(job_id, asked.id)
            listed = await client.profiles(job_id, limit=1)
            await client.profile(job_id)
            cancelled = await client.cancel_profile(job_id)
            return {
                "done": done.state,
                "shapes": asked.record_shapes,
                "paths": paths == [tmp_path / "a" / n for n in names],
                "latest": latest == done,
                "listed": [p.id for p in listed] == [asked.id],
                "cancelled": cancelled.state,
            }

    with serving(app) as url:
        outcome = asyncio.run(scenario(url, make_key()))
    assert outcome == {
        "done": ProfileState.DONE,
        "shapes": True,
        "paths": True,
        "latest": True,
        "listed": True,
        "cancelled": ProfileState.CANCELLED,
    }
