"""Submitting a job that runs bundled code: the API checks the bundle (the job's project's,
where bundled code may run) and that its entrypoint names a module of it binding the
attribute, and never imports it; everything else about it is the worker's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import KeyFactory
from tests.support.archives import allow_custom_code, zip_of
from tests.support.env import environment
from tests.support.factories import job_spec

RECIPE = b"recipe = None  # a RecipeDefinition on the node; the API only reads the name\n"


def keyed(app: FastAPI, key: str) -> TestClient:
    return TestClient(
        app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {key}"}
    )


@pytest.fixture(autouse=True)
def custom_code_allowed(backend: str) -> None:
    allow_custom_code("alpha", "beta")


@pytest.fixture
def unconfined(backend: str) -> Iterator[None]:
    with environment({"AMPFLEET_SANDBOX": "none"}):
        yield


def code_spec(
    bundle: str, entrypoint: str = "my_pkg.recipe:recipe", **extra: Any
) -> dict[str, Any]:
    spec = job_spec(project="alpha", code={"bundle": bundle, "entrypoint": entrypoint}, **extra)
    del spec["recipe"]
    return spec


def uploaded(client: TestClient, files: dict[str, bytes]) -> dict[str, Any]:
    response = client.post("/v1/bundles", content=zip_of(files))
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_where_bubblewrap_cannot_run_bundled_code_is_refused_naming_why(
    app: FastAPI, make_key: KeyFactory
) -> None:
    with keyed(app, make_key("alpha", "write")) as writer:
        bundle = uploaded(writer, {"my_pkg/recipe.py": RECIPE})
        with environment({"PATH": "/nonexistent"}):  # no bwrap to be found
            response = writer.post("/v1/jobs", json=code_spec(bundle["id"]))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["details"][0]["field"] == "code"
    assert "bubblewrap (bwrap) is not installed" in error["message"]
    assert "AMPFLEET_SANDBOX=none" in error["message"]


def test_a_bundled_job_is_queued_with_the_bundle_s_content_and_its_hyperparameters_as_given(
    unconfined: None, app: FastAPI, make_key: KeyFactory
) -> None:
    with keyed(app, make_key("alpha", "write")) as writer:
        bundle = uploaded(writer, {"my_pkg/recipe.py": RECIPE})
        spec = code_spec(bundle["id"], hyperparameters={"anything": [1, 2]})
        response = writer.post("/v1/jobs", json=spec)
        assert response.status_code == 202, response.text
        job = writer.get(f"/v1/jobs/{response.json()['id']}").json()
    assert job["state"] == "QUEUED"
    assert job["spec"]["code"] == {
        "bundle": bundle["id"],
        "entrypoint": "my_pkg.recipe:recipe",
        "command": None,
        "requirements": [],
        "sha256": bundle["sha256"],  # what the worker fetches: the bytes checked on upload
    }
    assert job["spec"]["hyperparameters"] == {"anything": [1, 2]}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"code": {"bundle": "bnd_" + "0" * 26, "entrypoint": "a:b"}}, "code.bundle", "not found"),
        ({"code": {"bundle": "bnd_x", "entrypoint": "a:b"}}, "code.bundle", "pattern"),
        ({"code": {"bundle": "bnd_" + "0" * 26, "entrypoint": "a/b.py"}}, "code.entrypoint", ""),
        ({"recipe": "digits"}, "recipe", "either `recipe`"),
        ({"code": None}, "recipe", "either `recipe`"),
    ],
)
def test_bad_code_fields_are_422(
    unconfined: None,
    app: FastAPI,
    make_key: KeyFactory,
    change: dict[str, Any],
    field: str,
    words: str,
) -> None:
    spec = {**code_spec("bnd_" + "0" * 26), **change}
    with keyed(app, make_key("alpha", "write")) as writer:
        response = writer.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["details"][0]["field"] == field, error
    assert words in error["message"]


def test_another_project_s_bundle_is_not_found(
    unconfined: None, app: FastAPI, make_key: KeyFactory
) -> None:
    with keyed(app, make_key("beta", "write")) as other:
        theirs = uploaded(other, {"my_pkg/recipe.py": RECIPE})
    with keyed(app, make_key("alpha", "write")) as writer:
        response = writer.post("/v1/jobs", json=code_spec(theirs["id"]))
    assert response.status_code == 422
    assert (
        f"bundle {theirs['id']} not found in project alpha" in response.json()["error"]["message"]
    )


def test_only_projects_that_allow_custom_code_may_upload_or_run_it(
    unconfined: None, app: FastAPI, make_key: KeyFactory, client: TestClient
) -> None:
    with keyed(app, make_key("alpha", "write")) as writer:
        bundle = uploaded(writer, {"my_pkg/recipe.py": RECIPE})
    policy = {"weight": 1.0, "allow_custom_code": False}
    assert client.put("/v1/projects/alpha", json=policy).json()["allow_custom_code"] is False
    with keyed(app, make_key("alpha", "write")) as writer:
        refused_upload = writer.post("/v1/bundles", content=zip_of({"b.py": b""}))
        refused_submit = writer.post("/v1/jobs", json=code_spec(bundle["id"]))
    for response in (refused_upload, refused_submit):
        assert response.status_code == 403, response.text
        assert "project alpha does not allow custom code" in response.json()["error"]["message"]
    # A project nobody configured: only the default project allows it.
    with keyed(app, make_key("gamma", "write")) as stranger:
        assert stranger.post("/v1/bundles", content=zip_of({"b.py": b""})).status_code == 403
    assert client.get("/v1/projects/gamma").json()["allow_custom_code"] is None
    assert client.post("/v1/bundles", content=zip_of({"b.py": b""})).status_code == 201


def test_a_bundle_in_use_by_an_unfinished_job_is_not_deleted(
    unconfined: None, app: FastAPI, make_key: KeyFactory
) -> None:
    with keyed(app, make_key("alpha", "write")) as writer:
        bundle = uploaded(writer, {"my_pkg/recipe.py": RECIPE})
        job = writer.post("/v1/jobs", json=code_spec(bundle["id"])).json()
        refused = writer.delete(f"/v1/bundles/{bundle['id']}")
        assert refused.status_code == 409
        assert job["id"] in refused.json()["error"]["message"]
        assert writer.post(f"/v1/jobs/{job['id']}/cancel").status_code in (200, 202)
        assert writer.delete(f"/v1/bundles/{bundle['id']}").status_code == 204


@pytest.mark.parametrize(
    "requirement",
    [
        "pkg @ file:///srv/pkg-0.2.tar.gz",
        "pkg @ https://example.com/pkg-0.2.tar.gz",
        "git+https://example.com/pkg.git",
        "pkg-0.2.tar.gz",
        "-e .",
        "--index-url=https://example.com/simple",
        'numpy; python_version > "3"',
    ],
)
def test_requirements_other_than_names_and_versions_are_422_naming_them(
    unconfined: None, app: FastAPI, make_key: KeyFactory, requirement: str
) -> None:
    with keyed(app, make_key("alpha", "write")) as writer:
        bundle = uploaded(writer, {"my_pkg/recipe.py": RECIPE})
        spec = code_spec(bundle["id"])
        spec["code"]["requirements"] = ["numpy>=2", requirement]
        response = writer.post("/v1/jobs", json=spec)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert error["details"][0]["field"] == "code.requirements.1", error
        assert repr(requirement) in error["message"]
        assert writer.get("/v1/jobs").json()["items"] == []


ENTRYPOINTS = {
    "a module": ({"my_pkg/recipe.py": RECIPE}, "my_pkg.recipe:recipe"),
    "a package": ({"my_pkg/recipe/__init__.py": RECIPE}, "my_pkg.recipe:recipe"),
    "top level": ({"recipe.py": RECIPE}, "recipe:recipe"),
    "imported as": ({"p/r.py": b"from p.impl import made as recipe\n"}, "p.r:recipe"),
    "defined in a branch": (
        {"p/r.py": b"try:\n    import fast as recipe\nexcept ImportError:\n    recipe = 0\n"},
        "p.r:recipe",
    ),
    "a def": ({"p/r.py": b"def recipe():\n    pass\n"}, "p.r:recipe"),
    "a star import": ({"p/r.py": b"from p.impl import *\n"}, "p.r:recipe"),
    "a module __getattr__": ({"p/r.py": b"def __getattr__(name):\n    pass\n"}, "p.r:recipe"),
    "a link": ({"p/impl.py": RECIPE}, "p.alias:recipe"),
}


@pytest.mark.parametrize("case", sorted(ENTRYPOINTS))
def test_an_entrypoint_the_bundle_defines_is_accepted(
    unconfined: None, app: FastAPI, make_key: KeyFactory, case: str
) -> None:
    files, entrypoint = ENTRYPOINTS[case]
    with keyed(app, make_key("alpha", "write")) as writer:
        response = writer.post("/v1/bundles", content=zip_of(files, {"p/alias.py": "impl.py"}))
        assert response.status_code == 201, response.text
        submitted = writer.post("/v1/jobs", json=code_spec(response.json()["id"], entrypoint))
    assert submitted.status_code == 202, submitted.text


@pytest.mark.parametrize(
    ("entrypoint", "words"),
    [
        (
            "my_pkg.nothing:recipe",
            "no module my_pkg.nothing in bundle bnd_",
        ),
        ("my_pkg:recipe", "neither my_pkg.py nor my_pkg/__init__.py"),  # a namespace package
        ("other.recipe:recipe", "(its top level: my_pkg, notes)"),
        ("my_pkg.recipe:build", "my_pkg/recipe.py defines no build at module level"),
        ("my_pkg.recipe:helper", "it binds math, recipe, trained"),  # not inside a function
    ],
)
def test_an_entrypoint_the_bundle_does_not_define_is_422_naming_what_is_missing(
    unconfined: None, app: FastAPI, make_key: KeyFactory, entrypoint: str, words: str
) -> None:
    source = b"import math\nrecipe = None\n\ndef trained():\n    helper = 1\n    return helper\n"
    with keyed(app, make_key("alpha", "write")) as writer:
        bundle = uploaded(writer, {"my_pkg/recipe.py": source, "notes/a.txt": b""})
        response = writer.post("/v1/jobs", json=code_spec(bundle["id"], entrypoint))
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert error["details"][0]["field"] == "code.entrypoint", error
        assert words in error["message"]
        assert writer.get("/v1/jobs").json()["items"] == []
