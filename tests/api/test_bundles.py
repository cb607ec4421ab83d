"""Code bundle routes: streamed upload into the store (201, then 200 for the same bytes), the
size limit, the archive checks before anything is unpacked, project scoping, roles, deletion."""

from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.core.artifacts import get_store, object_key
from tests.conftest import KeyFactory
from tests.support.archives import (
    allow_custom_code,
    file_entry,
    special_entry,
    tar_gz_of,
    zip_of,
)
from tests.support.env import environment

RECIPE = b"from ampfleet.recipes import RecipeDefinition\n"
# Random bytes do not compress: the archive is bigger than the API's 1 MiB JSON body limit.
BIG = os.urandom(3 << 20)


def keyed(app: FastAPI, key: str) -> TestClient:
    return TestClient(
        app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {key}"}
    )


@pytest.fixture(autouse=True)
def custom_code_allowed(backend: str) -> None:
    allow_custom_code("alpha", "beta")


@pytest.fixture
def writer(app: FastAPI, make_key: KeyFactory) -> Iterator[TestClient]:
    with keyed(app, make_key("alpha", "write")) as client:
        yield client


def upload(client: TestClient, body: bytes, **params: str) -> object:
    return client.post(
        "/v1/bundles",
        content=body,
        params=params,
        headers={"Content-Type": "application/octet-stream"},
    )


def test_upload_lists_the_files_and_the_same_bytes_are_the_same_bundle(
    writer: TestClient,
) -> None:
    body = zip_of({"my_pkg/__init__.py": b"", "my_pkg/recipe.py": RECIPE, "blob.bin": BIG})
    first = upload(writer, body)
    assert first.status_code == 201, first.text
    bundle = first.json()
    assert bundle["id"].startswith("bnd_")
    assert (bundle["project"], bundle["format"]) == ("alpha", "zip")
    assert (bundle["sha256"], bundle["size"]) == (hashlib.sha256(body).hexdigest(), len(body))
    assert (bundle["file_count"], bundle["unpacked_size"]) == (3, len(RECIPE) + len(BIG))
    assert {f["path"] for f in bundle["files"]} == {
        "my_pkg/__init__.py",
        "my_pkg/recipe.py",
        "blob.bin",
    }
    assert get_store().size(object_key(bundle["sha256"])) == len(body)

    again = upload(writer, body)
    assert again.status_code == 200
    assert again.json()["id"] == bundle["id"]
    assert writer.get(f"/v1/bundles/{bundle['id']}").json() == bundle
    assert [b["id"] for b in writer.get("/v1/bundles").json()["items"]] == [bundle["id"]]


def test_tar_gz_with_links_inside_the_tree(writer: TestClient) -> None:
    body = tar_gz_of(
        [
            special_entry(".", tarfile.DIRTYPE),
            file_entry("./pkg/recipe.py", RECIPE),
            special_entry("./pkg/alias.py", tarfile.SYMTYPE, "recipe.py"),
            special_entry("./top.py", tarfile.LNKTYPE, "./pkg/recipe.py"),
        ]
    )
    response = upload(writer, body)
    assert response.status_code == 201, response.text
    assert response.json()["format"] == "tar.gz"
    assert [(f["path"], f["kind"]) for f in response.json()["files"]] == [
        ("pkg/recipe.py", "file"),
        ("pkg/alias.py", "symlink"),
        ("top.py", "file"),
    ]


HOSTILE = {
    "absolute path": zip_of({"/etc/cron.d/evil": b"x"}),
    "dot-dot": tar_gz_of([file_entry("pkg/../../evil.py", b"x")]),
    "symlink to /": tar_gz_of([special_entry("root", tarfile.SYMTYPE, "/")]),
    "symlink up": tar_gz_of([special_entry("pkg/up", tarfile.SYMTYPE, "../../etc")]),
    "zip symlink up": zip_of({}, links={"up": "../secret"}),
    "through a link": tar_gz_of(
        [
            special_entry("here", tarfile.SYMTYPE, "."),
            special_entry("here/up", tarfile.SYMTYPE, ".."),
        ]
    ),
    "chain out": tar_gz_of(
        [
            special_entry("p/d", tarfile.SYMTYPE, "."),
            special_entry("p/e", tarfile.SYMTYPE, "d/../.."),
        ]
    ),
    "hard link out": tar_gz_of([special_entry("h", tarfile.LNKTYPE, "/etc/passwd")]),
    "device": tar_gz_of([special_entry("dev/null", tarfile.CHRTYPE)]),
    "fifo": tar_gz_of([special_entry("pipe", tarfile.FIFOTYPE)]),
    "twice": tar_gz_of([file_entry("a.py", b"1"), file_entry("a.py", b"2")]),
    "not an archive": b"just some text, not a zip",
    "truncated zip": zip_of({"a.py": RECIPE})[:-30],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_before_anything_is_stored(
    writer: TestClient, case: str
) -> None:
    response = upload(writer, HOSTILE[case])
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["field"] == "body"
    assert list(get_store().keys()) == []
    assert writer.get("/v1/bundles").json()["items"] == []


NOT_COMPILING = {
    "syntax error": (b"x = 1\ndef build(hp, ctx:\n    pass\n", "line 2 does not compile"),
    "indentation": (b"x = 1\n  y = 2\n", "line 2 does not compile: unexpected indent"),
    "only the compiler sees": (b"import os\nreturn os\n", "line 2 does not compile: 'return'"),
    "NUL bytes": (b"x = 1\x00\n", "does not compile: source code string cannot contain null"),
    "not UTF-8": (b"name = '\xff'\n", "line 1 does not compile: (unicode error)"),
    "nested too deep": (b"x = " + b"-" * 100_000 + b"1\n", "too deeply nested to compile"),
}


@pytest.mark.parametrize("case", sorted(NOT_COMPILING))
@pytest.mark.parametrize("packed", ["zip", "tar.gz"])
def test_python_that_does_not_compile_is_refused_naming_file_and_line(
    writer: TestClient, case: str, packed: str
) -> None:
    """Compiled on upload, never run: the error a rank would meet minutes later on a node is
    a 422 now, and nothing is stored."""
    source, words = NOT_COMPILING[case]
    files = {"my_pkg/__init__.py": b"", "my_pkg/model.py": source, "notes.txt": b"def ("}
    body = (
        zip_of(files)
        if packed == "zip"
        else tar_gz_of([file_entry(name, data) for name, data in files.items()])
    )
    response = upload(writer, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["field"] == "body"
    assert "my_pkg/model.py" in error["message"]
    assert words in error["message"]
    assert list(get_store().keys()) == []
    assert writer.get("/v1/bundles").json()["items"] == []


def test_python_source_past_its_limit_is_refused_naming_it(writer: TestClient) -> None:
    body = zip_of({f"pkg/m{i}.py": b"x = 1\n" * 100 for i in range(3)})  # 1800 bytes
    with environment({"AMPFLEET_MAX_BUNDLE_SOURCE_BYTES": "1000"}):
        refused = upload(writer, body)
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert "more than 1000 bytes of Python source" in message
    assert "AMPFLEET_MAX_BUNDLE_SOURCE_BYTES" in message
    assert list(get_store().keys()) == []
    assert upload(writer, body).status_code == 201


def test_zip_bomb_and_file_count_caps_name_the_limit(writer: TestClient) -> None:
    bomb = zip_of({f"zeros{i}.bin": bytes(4 << 20) for i in range(3)})  # 12 MiB, ~12 KiB packed
    many = zip_of({f"f{i}.py": b"" for i in range(30)})
    values = {
        "AMPFLEET_MAX_ARCHIVE_UNPACKED_BYTES": str(5 << 20),
        "AMPFLEET_MAX_ARCHIVE_FILES": "20",
    }
    with environment(values):
        refused_bomb = upload(writer, bomb)
        refused_many = upload(writer, many)
    assert refused_bomb.status_code == 422
    assert f"unpacks to more than {5 << 20} bytes" in refused_bomb.json()["error"]["message"]
    assert refused_many.status_code == 422
    assert "more than 20 entries" in refused_many.json()["error"]["message"]


def test_size_limit_is_413_naming_it(writer: TestClient) -> None:
    body = zip_of({"blob.bin": BIG})
    with environment({"AMPFLEET_MAX_BUNDLE_BYTES": str(1 << 20)}):
        declared = upload(writer, body)

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield from (body[i : i + 65536] for i in range(0, len(body), 65536))

        streamed = writer.post("/v1/bundles", content=chunks())
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert "AMPFLEET_MAX_BUNDLE_BYTES = 1048576 bytes" in response.json()["error"]["message"]
    assert list(get_store().keys()) == []


def test_projects_and_roles(app: FastAPI, writer: TestClient, make_key: KeyFactory) -> None:
    bundle = upload(writer, zip_of({"a.py": RECIPE})).json()
    with keyed(app, make_key("beta", "write")) as other:
        assert other.get(f"/v1/bundles/{bundle['id']}").status_code == 404
        assert other.delete(f"/v1/bundles/{bundle['id']}").status_code == 404
        assert other.get("/v1/bundles").json()["items"] == []
        # The same bytes in another project are that project's own bundle.
        theirs = upload(other, zip_of({"a.py": RECIPE}))
        assert theirs.status_code == 201
        assert theirs.json()["id"] != bundle["id"]
        refused = upload(other, zip_of({"a.py": RECIPE}), project="alpha")
        assert refused.status_code == 403
        assert "belongs to project beta" in refused.json()["error"]["message"]
    with keyed(app, make_key("alpha", "read")) as reader:
        assert reader.get(f"/v1/bundles/{bundle['id']}").status_code == 200
        refused = upload(reader, zip_of({"b.py": RECIPE}))
        assert refused.status_code == 403
        assert "read-only" in refused.json()["error"]["message"]
        assert reader.delete(f"/v1/bundles/{bundle['id']}").status_code == 403


def test_delete_drops_the_object_only_when_nothing_else_names_it(
    app: FastAPI, writer: TestClient, make_key: KeyFactory
) -> None:
    body = zip_of({"a.py": RECIPE})
    mine = upload(writer, body).json()
    with keyed(app, make_key("beta", "write")) as other:
        theirs = upload(other, body).json()
        assert writer.delete(f"/v1/bundles/{mine['id']}").status_code == 204
        assert writer.get(f"/v1/bundles/{mine['id']}").status_code == 404
        assert get_store().size(object_key(mine["sha256"])) == len(body)  # beta's still
        assert other.delete(f"/v1/bundles/{theirs['id']}").status_code == 204
    assert get_store().size(object_key(mine["sha256"])) is None
