"""Every listing scopes by project the same way: a key that is not admin sees its own
project's rows, its `project` filter naming another project answers an empty page (those
rows do not exist for it), and an admin's filter picks that project."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.support.env import environment
from tests.support.factories import submit

LISTINGS = ("/v1/jobs", "/v1/queue", "/v1/keys", "/v1/webhooks", "/v1/projects")


def projects_listed(client: TestClient, path: str, **params: str) -> list[str]:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    return sorted({item["name"] if path == "/v1/projects" else item["project"] for item in items})


@pytest.fixture
def two_projects(app, make_key) -> tuple[TestClient, TestClient, TestClient]:
    """Keys of alpha and beta, and an admin; each project with a queued job, a webhook and
    its key."""
    alpha = TestClient(app, headers={"Authorization": f"Bearer {make_key('alpha', 'write')}"})
    beta = TestClient(app, headers={"Authorization": f"Bearer {make_key('beta', 'write')}"})
    admin = TestClient(app, headers={"Authorization": f"Bearer {make_key('ops', 'admin')}"})
    with environment({"AMPFLEET_WEBHOOK_ALLOW_PRIVATE": "true"}):
        for client in (alpha, beta):
            submit(client)
            hook = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook"})
            assert hook.status_code == 201, hook.text
    return alpha, beta, admin


@pytest.mark.parametrize("path", LISTINGS)
def test_a_key_lists_its_own_project_only(two_projects, path: str) -> None:
    alpha, beta, _ = two_projects
    assert projects_listed(alpha, path) == ["alpha"]
    assert projects_listed(beta, path) == ["beta"]
    assert projects_listed(beta, path, project="beta") == ["beta"]


@pytest.mark.parametrize("path", LISTINGS)
def test_filtering_by_a_project_the_key_cannot_see_answers_an_empty_page(
    two_projects, path: str
) -> None:
    _, beta, _ = two_projects
    response = beta.get(path, params={"project": "alpha"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["items"] == []
    if "next_cursor" in body:
        assert body["next_cursor"] is None
    if "total" in body:
        assert body["total"] == 0


@pytest.mark.parametrize("path", LISTINGS)
def test_an_admin_sees_every_project_and_filters_by_one(two_projects, path: str) -> None:
    _, _, admin = two_projects
    assert {"alpha", "beta"} <= set(projects_listed(admin, path))
    assert projects_listed(admin, path, project="alpha") == ["alpha"]
