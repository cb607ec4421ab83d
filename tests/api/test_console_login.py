"""Console login tokens (what `ampfleet ui` opens) and the sessions they are exchanged for:
one use each, a minute to use it, the key's project and role, and nothing kept of the token
but its keyed hash. The clock is the request's (`request_time`), moved by the tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from ampfleet.api.deps import request_time
from ampfleet.core.db import session_scope
from ampfleet.core.models import ConsoleLoginToken, utcnow
from tests.support.env import environment
from tests.support.factories import job_spec

pytestmark = pytest.mark.parametrize("backend", ["postgres", "sqlite"], indirect=True)


class Clock:
    """The time every request of the app reads, moved by hand."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(app: FastAPI) -> Iterator[Clock]:
    moved = Clock()
    app.dependency_overrides[request_time] = moved
    yield moved
    app.dependency_overrides.pop(request_time)


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def login_token(http: TestClient, key: str) -> dict[str, str]:
    answer = http.post("/v1/console-tokens", headers=bearer(key))
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def exchange(http: TestClient, token: str) -> tuple[int, dict[str, object]]:
    answer = http.post("/v1/console-sessions", json={"token": token})
    return answer.status_code, answer.json()


def open_session(http: TestClient, key: str) -> dict[str, object]:
    status, opened = exchange(http, login_token(http, key)["token"])
    assert status == 201, opened
    return opened


def error_code(body: dict[str, object]) -> object:
    error = body["error"]
    return error["code"] if isinstance(error, dict) else None


def test_a_token_opens_one_session_as_its_key(
    app: FastAPI, clock: Clock, make_key: Callable[..., str]
) -> None:
    key = make_key(project="alpha", role="write")
    with TestClient(app, raise_server_exceptions=False) as http:
        issued = login_token(http, key)
        token = issued["token"]
        assert issued["login_path"] == f"/ui/#login={token}"
        assert datetime.fromisoformat(issued["expires_at"]) == clock.now + timedelta(seconds=60)
        with session_scope() as db:
            (row,) = db.scalars(select(ConsoleLoginToken)).all()
            stored = [str(getattr(row, c.key)) for c in ConsoleLoginToken.__table__.columns]
        assert all(token not in value for value in stored)  # only its keyed hash

        status, opened = exchange(http, token)
        assert status == 201, opened
        assert (opened["project"], opened["role"]) == ("alpha", "write")
        session = str(opened["session"])
        assert session.startswith("ampc_")
        assert key not in session
        # The session is the key's: its project's jobs, its role's writes.
        submitted = http.post("/v1/jobs", json=job_spec(project="alpha"), headers=bearer(session))
        assert submitted.status_code == 202, submitted.text
        listed = http.get("/v1/jobs", headers=bearer(session)).json()["items"]
        assert [job["id"] for job in listed] == [submitted.json()["id"]]
        elsewhere = http.post("/v1/jobs", json=job_spec(project="beta"), headers=bearer(session))
        assert elsewhere.status_code == 403

        status, again = exchange(http, token)
        assert (status, error_code(again)) == (401, "login_token_used")
        status, wrong = exchange(http, f"ampl_{uuid.uuid4().hex}")
        assert (status, error_code(wrong)) == (401, "login_token_invalid")
        assert "ampfleet ui" in str(wrong["error"])


def test_a_token_lapses_after_its_minute_unused(
    app: FastAPI, clock: Clock, make_key: Callable[..., str]
) -> None:
    key = make_key()
    with TestClient(app, raise_server_exceptions=False) as http:
        token = login_token(http, key)["token"]
        clock.advance(60)
        status, body = exchange(http, token)
        assert (status, error_code(body)) == (401, "login_token_expired")
        with session_scope() as db:
            assert db.scalars(select(ConsoleLoginToken.used_at)).one() is None  # unchanged

        late = login_token(http, key)["token"]
        clock.advance(59)
        assert exchange(http, late)[0] == 201  # within its minute


def test_a_session_lapses_dies_with_its_key_and_cannot_renew_itself(
    app: FastAPI, clock: Clock, make_key: Callable[..., str]
) -> None:
    admin = make_key()
    key = make_key(role="read")
    with TestClient(app, raise_server_exceptions=False) as http:
        opened = open_session(http, key)
        session = bearer(str(opened["session"]))
        assert http.get("/v1/jobs", headers=session).status_code == 200
        assert http.post("/v1/jobs", json=job_spec(), headers=session).status_code == 403
        renewed = http.post("/v1/console-tokens", headers=session)
        assert renewed.status_code == 403
        assert "console session" in renewed.json()["error"]["message"]

        clock.advance(12 * 3600 - 1)
        assert http.get("/v1/jobs", headers=session).status_code == 200
        clock.advance(1)
        ended = http.get("/v1/jobs", headers=session)
        assert (ended.status_code, error_code(ended.json())) == (401, "session_expired")

        clock.advance(-3600)
        key_id = str(opened["key_id"])
        assert http.delete(f"/v1/keys/{key_id}", headers=bearer(admin)).status_code == 204
        revoked = http.get("/v1/jobs", headers=session)
        assert (revoked.status_code, error_code(revoked.json())) == (401, "unauthorized")


def test_a_token_of_a_key_revoked_since_opens_nothing(
    app: FastAPI, clock: Clock, make_key: Callable[..., str]
) -> None:
    admin, key = make_key(), make_key(role="write")
    with TestClient(app, raise_server_exceptions=False) as http:
        token = login_token(http, key)["token"]
        key_id = next(
            k["id"]
            for k in http.get("/v1/keys", headers=bearer(admin)).json()["items"]
            if k["role"] == "write"
        )
        assert http.delete(f"/v1/keys/{key_id}", headers=bearer(admin)).status_code == 204
        status, body = exchange(http, token)
        assert (status, error_code(body)) == (401, "unauthorized")
        assert "revoked" in str(body["error"])


def test_forged_sessions_and_wrong_tokens_are_wrong_keys(
    app: FastAPI, clock: Clock, make_key: Callable[..., str]
) -> None:
    address = f"guesser-{uuid.uuid4().hex[:8]}"  # buckets outlive a test
    values = {"AMPFLEET_AUTH_FAILURE_RATE_PER_S": "0.01", "AMPFLEET_AUTH_FAILURE_BURST": "3"}
    with environment(values), TestClient(app, client=(address, 50000)) as http:
        opened = open_session(http, make_key())
        claims, _, signature = str(opened["session"]).removeprefix("ampc_").partition(".")
        forged = f"ampc_{claims}.{signature[:-2]}AA"
        assert http.get("/v1/jobs", headers=bearer(forged)).status_code == 401
        codes = [exchange(http, f"ampl_guess{n}")[0] for n in range(3)]
        assert codes == [401, 401, 429]  # the forged session counted as the first wrong one
