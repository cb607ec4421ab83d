"""Downloading what a job produced, as flows (see protocol.py), for both clients.

A download goes to `<target>.part` and becomes `<target>` only once its size and sha256 are
the ones the API listed, so a file at the target is always whole and right. A broken
connection resumes from the end of the part file (`Range`, with `If-Range` naming the listed
ETag, so the server sends everything again if the bytes changed); a part file left by an
earlier, interrupted call continues the same way. Bytes that do not verify raise
`DownloadCorrupted` and leave no file.

Names the server lists are checked with the same pattern it enforces before they become
local paths, and request URLs are built here from the job id and the name, never taken from
the answer: a URL to another host would carry the API key there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import quote

from pydantic import TypeAdapter

from ampfleet.core.artifact_names import MODEL_BUNDLE, checkpoint_name, is_valid_name
from ampfleet.sdk.errors import (
    ApiError,
    ConnectionFailed,
    DownloadCorrupted,
    NotFound,
    ValidationFailed,
)
from ampfleet.sdk.flows import Operations
from ampfleet.sdk.models import Artifact, Checkpoint, Sample
from ampfleet.sdk.protocol import DOWNLOAD_CHUNK, READ_CHUNK, Flow, Request, Sleep

PART_SUFFIX = ".part"
MODEL = "model"  # what `download(job, "model")` means: MODEL_BUNDLE
CHECKPOINT_SUFFIX = ".tar"
ProgressCallback = Callable[[str, int, int], None]
"""Called as bytes arrive with (name, bytes so far, total bytes) of the file being fetched."""
_artifacts = TypeAdapter(list[Artifact])
_checkpoints = TypeAdapter(list[Checkpoint])
_samples = TypeAdapter(list[Sample])


def _job_path(job_id: str, suffix: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"


def list_artifacts(ops: Operations, job_id: str) -> Flow[list[Artifact]]:
    response = yield from ops.send(Request("GET", _job_path(job_id, "/artifacts")))
    return _artifacts.validate_python(response.json()["items"])


def list_checkpoints(ops: Operations, job_id: str) -> Flow[list[Checkpoint]]:
    response = yield from ops.send(Request("GET", _job_path(job_id, "/checkpoints")))
    return _checkpoints.validate_python(response.json()["items"])


def list_samples(ops: Operations, job_id: str, limit: int) -> Flow[list[Sample]]:
    params = (("limit", str(limit)),)
    response = yield from ops.send(Request("GET", _job_path(job_id, "/samples"), params=params))
    return _samples.validate_python(response.json()["items"])


def download(
    ops: Operations, job_id: str, name: str, to: Path, progress: ProgressCallback | None
) -> Flow[list[Path]]:
    """The artifact `name` (or, for "model", the weights and the manifest; for a name that
    ends in "/", every artifact under it, as `hf/merged/`) into folder `to`, each at
    `to/<name>`; returns the paths."""
    if name.endswith("/"):
        listed = yield from list_artifacts(ops, job_id)
        wanted: Sequence[str] = [a.name for a in listed if a.name.startswith(name)]
        if not wanted:
            raise NotFound(404, "not_found", f"job {job_id} has no artifact under {name}")
    else:
        wanted = MODEL_BUNDLE if name == MODEL else (name,)
    return (yield from download_names(ops, job_id, wanted, to, progress))


def download_names(
    ops: Operations,
    job_id: str,
    wanted: Sequence[str],
    to: Path,
    progress: ProgressCallback | None,
) -> Flow[list[Path]]:
    """The artifacts named `wanted` into folder `to`, each at `to/<name>`; returns the paths."""
    for each in wanted:
        if not is_valid_name(each):
            raise ValidationFailed(422, "validation_error", f"not an artifact name: {each!r}")
    listed = {a.name: a for a in (yield from list_artifacts(ops, job_id))}
    missing = [each for each in wanted if each not in listed]
    if missing:
        raise NotFound(404, "not_found", f"job {job_id} has no artifact {', '.join(missing)}")
    paths = []
    for each in wanted:
        artifact = listed[each]
        url = _job_path(job_id, f"/artifacts/{quote(each, safe='/')}")
        path = yield from fetch(
            ops,
            url,
            to / each,
            name=each,
            size=artifact.size,
            sha256=artifact.sha256,
            progress=progress,
        )
        paths.append(path)
    return paths


def download_checkpoint(
    ops: Operations, job_id: str, step: int, to: Path, progress: ProgressCallback | None
) -> Flow[Path]:
    """The checkpoint at `step` (one tar of its files) into `to/checkpoint-<step>.tar`."""
    listed = {c.step: c for c in (yield from list_checkpoints(ops, job_id))}
    if step not in listed:
        raise NotFound(404, "not_found", f"job {job_id} has no stored checkpoint at step {step}")
    checkpoint = listed[step]
    name = checkpoint_name(step)
    return (
        yield from fetch(
            ops,
            _job_path(job_id, f"/checkpoints/{step}/download"),
            to / f"{name}{CHECKPOINT_SUFFIX}",
            name=name,
            size=checkpoint.size,
            sha256=checkpoint.sha256,
            progress=progress,
        )
    )


def fetch(
    ops: Operations,
    url: str,
    target: Path,
    *,
    name: str,
    size: int,
    sha256: str,
    progress: ProgressCallback | None,
) -> Flow[Path]:
    """One object to `target`, resumed across broken connections (at most `max_reconnects`
    in a row without progress) and verified."""
    part = target.with_name(target.name + PART_SUFFIX)
    target.parent.mkdir(parents=True, exist_ok=True)
    part.touch()
    etag = f'"{sha256}"'
    stalls = 0  # passes in a row that added nothing: a broken connection, a short answer
    started_from_old_part = _size(part) > 0
    while True:
        offset = _size(part)
        if offset > size:
            part.write_bytes(b"")  # not a prefix of this object
            continue
        if offset < size:
            # A broken connection: the next pass resumes from what the part file holds.
            with contextlib.suppress(ConnectionFailed):
                yield from _fill(ops, url, part, offset, etag, size, name, progress)
            stalls = stalls + 1 if _size(part) <= offset else 0
            if stalls > ops.max_reconnects:
                raise ConnectionFailed(
                    f"downloading {name} made no progress in {stalls} tries; rerun to resume"
                )
            if stalls:
                yield Sleep(min(0.25 * 2 ** (stalls - 1), 5.0))
            continue
        actual = _sha256_of(part)
        if actual == sha256:
            os.replace(part, target)
            return target
        part.unlink(missing_ok=True)
        if started_from_old_part:
            # The part file was there before this call: perhaps of other bytes that once had
            # this name. Once more, from nothing.
            started_from_old_part = False
            part.touch()
            continue
        raise DownloadCorrupted(name, sha256, actual)


def _fill(
    ops: Operations,
    url: str,
    part: Path,
    offset: int,
    etag: str,
    size: int,
    name: str,
    progress: ProgressCallback | None,
) -> Flow[None]:
    """Appends to the part file what the server sends from `offset` on."""
    headers = {"Range": f"bytes={offset}-", "If-Range": etag} if offset else {}
    try:
        response = yield from ops.send(Request("GET", url, headers=headers, stream=True))
    except ApiError as error:
        if error.status == 416:  # the part is not a prefix of the object: start over
            part.write_bytes(b"")
            return
        raise
    if response.status_code != 206 or not response.headers.get("content-range", "").startswith(
        f"bytes {offset}-"
    ):
        offset = 0  # the whole object came (If-Range did not match): it replaces the part
    with part.open("r+b" if offset else "wb") as file:
        file.seek(offset)
        file.truncate()
        done = offset
        # Chunk writes to a local file are short, so the async client runs them inline too.
        while (chunk := (yield READ_CHUNK)) is not None:
            file.write(chunk)
            done += len(chunk)
            if progress is not None:
                progress(name, done, size)
        file.flush()
        os.fsync(file.fileno())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(DOWNLOAD_CHUNK):
            digest.update(block)
    return digest.hexdigest()
