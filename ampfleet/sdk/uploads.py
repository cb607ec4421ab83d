"""Uploading a folder or a file as a bundle or a dataset, written once as flows.

A folder is packed first (`packing.pack_folder`, into a temporary file that goes when the
upload is over); a bundle over the server's limit is refused with the limit and, for a
folder packed here, its largest files, which is what one needs to trim it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from ampfleet.sdk.errors import ApiError
from ampfleet.sdk.models import ApiModel, Bundle, Dataset
from ampfleet.sdk.packing import Packed, pack_folder
from ampfleet.sdk.protocol import Flow, Request, Upload, query

Progress = Callable[[int], None]
M = TypeVar("M", bound=ApiModel)


@contextmanager
def packed_source(source: Path) -> Iterator[tuple[Path, Packed | None]]:
    """The file to send for `source`: itself, or a tar.gz of the folder it is."""
    if not source.is_dir():
        if not source.is_file():
            raise FileNotFoundError(f"{source} is neither a file nor a folder")
        yield source, None
        return
    with tempfile.TemporaryDirectory(prefix="ampfleet-pack-") as scratch:
        packed = pack_folder(source, Path(scratch) / f"{source.resolve().name}.tar.gz")
        yield packed.archive, packed


def _with_largest(error: ApiError, packed: Packed | None) -> ApiError:
    if error.status != 413 or packed is None:
        return error
    listed = ", ".join(f"{path} ({size / (1 << 20):.1f} MiB)" for path, size in packed.largest())
    return type(error)(
        error.status,
        error.code,
        f"{error.message}. Largest files packed: {listed}; leave them out with .ampignore",
        error.details,
    )


def upload_flow(
    send: Callable[[Request], Flow[httpx.Response]],
    path: str,
    source: Path,
    params: dict[str, str | None],
    on_progress: Progress | None,
) -> Flow[httpx.Response]:
    """POST `source` (packed if a folder) to `path`; a single file keeps its name."""
    with packed_source(source) as (body, packed):
        request = Request("POST", path, query(**params), upload=Upload(body, on_progress))
        try:
            return (yield from send(request))
        except ApiError as error:
            raise _with_largest(error, packed) from None


def _looks_like_archive(path: Path) -> bool:
    with path.open("rb") as head:
        magic = head.read(4)
    return magic.startswith(b"PK\x03\x04") or magic.startswith(b"\x1f\x8b")


def upload_bundle(
    send: Callable[[Request], Flow[httpx.Response]],
    source: Path,
    project: str | None,
    on_progress: Progress | None,
) -> Flow[Bundle]:
    params: dict[str, str | None] = {"project": project}
    response = yield from upload_flow(send, "/v1/bundles", source, params, on_progress)
    return Bundle.model_validate_json(response.content)


def upload_dataset(
    send: Callable[[Request], Flow[httpx.Response]],
    name: str,
    source: Path,
    project: str | None,
    filename: str | None,
    on_progress: Progress | None,
) -> Flow[Dataset]:
    if filename is None and source.is_file() and not _looks_like_archive(source):
        filename = source.name  # one file: the ranks read it under its own name
    params = {"name": name, "project": project, "filename": filename}
    response = yield from upload_flow(send, "/v1/datasets", source, params, on_progress)
    return Dataset.model_validate_json(response.content)


def list_of(
    send: Callable[[Request], Flow[httpx.Response]], path: str, model: type[M], **params: object
) -> Flow[list[M]]:
    response = yield from send(Request("GET", path, query(**params)))
    return [model.model_validate(item) for item in response.json()["items"]]


def spec_with_code(
    spec: Mapping[str, Any], bundle_id: str | None, inputs: Mapping[str, str]
) -> dict[str, Any]:
    """`spec` with `code.bundle` set (an entrypoint stays as the spec gave it) and `inputs`
    added to those it names."""
    merged = dict(spec)
    if bundle_id is not None:
        merged["code"] = {**(merged.get("code") or {}), "bundle": bundle_id}
    if inputs:
        merged["inputs"] = {**(merged.get("inputs") or {}), **inputs}
    return merged


def spec_with_command(spec: Mapping[str, Any], command: Sequence[str]) -> dict[str, Any]:
    """`spec` running `command` as it is on every rank (script mode, `code.command`)."""
    merged = dict(spec)
    merged["code"] = {**(merged.get("code") or {}), "command": list(command)}
    return merged
