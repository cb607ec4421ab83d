"""A project's name is one rule (core/project_names.py) on both backends: too long, empty or
outside the alphabet is a 422 naming `project` wherever a name is taken (key, webhook and job
bodies, upload and listing queries, the projects path), never a 500 from PostgreSQL and
never an object in a project SQLite would store but nobody could name; the longest name
allowed works end to end."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ampfleet.core.db import session_scope
from ampfleet.core.models import ApiKey, Job, Webhook
from tests.support.archives import zip_of
from tests.support.factories import job_spec

LONGEST = "p" * 64
REFUSED = ["p" * 65, "p" * 129, "", "../etc", "a b", "-lead"]


def bodies(project: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("/v1/keys", {"project": project, "role": "write"}),
        ("/v1/webhooks", {"project": project, "url": "https://1.1.1.1/hook"}),
        ("/v1/jobs", job_spec(project=project)),
    ]


def rows() -> int:
    with session_scope() as session:
        return sum(
            session.scalar(select(func.count()).select_from(model)) or 0
            for model in (ApiKey, Job, Webhook)
        )


@pytest.mark.parametrize("project", REFUSED)
def test_a_bad_project_name_is_422_everywhere_and_creates_nothing(
    client: TestClient, project: str
) -> None:
    before = rows()
    for path, body in bodies(project):
        response = client.post(path, json=body)
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert error["details"][0]["field"] == "project", (path, error)
    for path in ("/v1/jobs", "/v1/keys", "/v1/webhooks", "/v1/bundles", "/v1/datasets"):
        listed = client.get(path, params={"project": project})
        assert listed.status_code == 422, (path, listed.text)
    upload = client.post("/v1/bundles", params={"project": project}, content=zip_of({"a.py": b""}))
    assert upload.status_code == 422, upload.text
    if project:  # an empty path segment is another route
        assert client.get(f"/v1/projects/{project}").status_code in (404, 422)
    assert rows() == before


def test_the_longest_allowed_name_works_on_both_backends(client: TestClient) -> None:
    for path, body in bodies(LONGEST):
        response = client.post(path, json=body)
        assert response.status_code in (201, 202), (path, response.text)
        assert response.json()["project"] == LONGEST
    assert client.get("/v1/jobs", params={"project": LONGEST}).json()["items"]
