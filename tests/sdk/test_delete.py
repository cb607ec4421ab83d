"""`client.delete(job_id)` (sync and async) and `ampfleet delete JOB` against a live API."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import update
from typer.testing import CliRunner

from ampfleet import AsyncClient, Client
from ampfleet.cli import app as cli
from ampfleet.core.db import session_scope
from ampfleet.core.models import Job
from ampfleet.core.states import JobState
from ampfleet.sdk import Conflict, NotFound
from tests.conftest import KeyFactory
from tests.support.factories import job_spec
from tests.support.sdk_api import serving

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def api(app: FastAPI, make_key: KeyFactory) -> Iterator[dict[str, Any]]:
    """A live API, a write key, and two jobs of its project that ended."""
    with serving(app) as base_url, Client(base_url, make_key("alpha", "write")) as client:
        ids = [client.submit(job_spec()).id for _ in range(2)]
        with session_scope() as session:
            session.execute(update(Job).where(Job.id.in_(ids)).values(state=JobState.FAILED))
        yield {"url": base_url, "key": client.api_key, "ended": ids, "client": client}


def test_the_sdk_deletes_a_job_that_ended(api: dict[str, Any]) -> None:
    client: Client = api["client"]
    client.delete(api["ended"][0])
    with pytest.raises(NotFound):
        client.get(api["ended"][0])

    async def delete_the_other() -> None:
        async with AsyncClient(api["url"], api["key"]) as other:
            await other.delete(api["ended"][1])

    asyncio.run(delete_the_other())
    with pytest.raises(NotFound):
        client.get(api["ended"][1])


def test_a_queued_job_is_a_conflict(api: dict[str, Any]) -> None:
    client: Client = api["client"]
    queued = client.submit(job_spec())
    with pytest.raises(Conflict, match="QUEUED"):
        client.delete(queued.id)


def test_the_cli_asks_first_unless_yes(api: dict[str, Any]) -> None:
    first, second = api["ended"]
    args = ["--url", api["url"], "--key", api["key"]]
    declined = runner.invoke(cli, ["delete", first, *args], input="n\n")
    assert declined.exit_code == 1
    assert api["client"].get(first).id == first

    confirmed = runner.invoke(cli, ["delete", first, *args], input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert f"deleted {first}" in confirmed.output

    unasked = runner.invoke(cli, ["delete", second, "--yes", *args])
    assert unasked.exit_code == 0, unasked.output
    with pytest.raises(NotFound):
        api["client"].get(second)

    again = runner.invoke(cli, ["delete", second, "--yes", *args])
    assert again.exit_code == 1
    assert "not found" in again.output
