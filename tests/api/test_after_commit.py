"""What a handler registers with `after_commit` (waking the scheduler) runs once the
request's unit of work has committed, so it finds the rows; never after a rollback; and one
that fails leaves the commit and the answer as they were."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import ConflictError, install_error_handlers
from ampfleet.core.db import after_commit, session_scope
from ampfleet.core.models import Project


def committed_projects() -> list[str]:
    with session_scope() as session:
        return sorted(session.scalars(select(Project.name)))


def app_that_adds_projects(then: Callable[[], None]) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/projects/{name}")
    def add(name: str, session: SessionDep, refuse: bool = False) -> dict[str, str]:
        session.add(Project(name=name))
        session.flush()
        after_commit(session, then)
        if refuse:
            raise ConflictError("refused after the write")
        return {"name": name}

    return app


def test_an_action_after_commit_finds_the_committed_rows(backend: str) -> None:
    seen: list[list[str]] = []
    client = TestClient(app_that_adds_projects(lambda: seen.append(committed_projects())))
    assert client.post("/projects/alpha").status_code == 200
    assert seen == [["alpha"]]


def test_a_request_that_rolls_back_runs_no_action(backend: str) -> None:
    seen: list[list[str]] = []
    client = TestClient(app_that_adds_projects(lambda: seen.append(committed_projects())))
    response = client.post("/projects/alpha", params={"refuse": "true"})
    assert response.status_code == 409
    assert seen == []
    assert committed_projects() == []


def test_a_failing_action_leaves_the_commit_and_the_answer(backend: str) -> None:
    def broken() -> None:
        raise RuntimeError("the broker is down")

    client = TestClient(app_that_adds_projects(broken))
    assert client.post("/projects/alpha").json() == {"name": "alpha"}
    assert committed_projects() == ["alpha"]
