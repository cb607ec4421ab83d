"""Rules of a job's artifacts: who sees them, how a name is looked up, what a download sends.

A client's name is checked against the one strict pattern and then only ever looked up in
the job's rows: the bytes come from the store under the row's content address, so nothing a
client sends reaches a path or a bucket key. Another project's job, and so its artifacts, do
not exist (404). Any key that may read the job may download (read keys included).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

from sqlalchemy.orm import Session

from ampfleet.api.artifacts import repository
from ampfleet.api.artifacts.objects import open_span, read_head
from ampfleet.api.artifacts.ranges import not_modified, quoted_etag, span_of
from ampfleet.api.artifacts.schemas import (
    ArtifactList,
    ArtifactOut,
    CheckpointList,
    CheckpointOut,
    SampleList,
    SampleOut,
)
from ampfleet.api.auth import Principal
from ampfleet.api.errors import NotFoundError, UnprocessableError
from ampfleet.api.jobs import service as jobs
from ampfleet.core.artifact_names import (
    MAX_NAME_LENGTH,
    SAMPLE_KIND,
    checkpoint_name,
    is_valid_name,
)
from ampfleet.core.models import Artifact

CHECKPOINT = "checkpoint"
CHECKPOINT_SUFFIX = ".tar"  # one object per checkpoint: an uncompressed tar of its files
SAMPLE_TEXT_LIMIT = 64 << 10  # of each evaluation's samples, shown inline


def _job_path(job_id: str, suffix: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"


def artifact_url(artifact: Artifact) -> str:
    return _job_path(artifact.job_id, f"/artifacts/{quote(artifact.name, safe='/')}")


def checkpoint_url(artifact: Artifact) -> str:
    return _job_path(artifact.job_id, f"/checkpoints/{artifact.step}/download")


def list_artifacts(session: Session, job_id: str, principal: Principal) -> ArtifactList:
    jobs.get(session, job_id, principal)
    return ArtifactList(
        items=[
            ArtifactOut.model_validate(
                {**_columns(a), "download_url": artifact_url(a)}, from_attributes=False
            )
            for a in repository.for_job(session, job_id)
        ]
    )


def list_checkpoints(session: Session, job_id: str, principal: Principal) -> CheckpointList:
    """Each stored checkpoint with the metrics the job reported at its step."""
    job = jobs.get(session, job_id, principal)
    stored = repository.for_job(session, job_id, kind=CHECKPOINT)
    steps = {a.step or 0 for a in stored}
    metrics = repository.metrics_at(session, job_id, list(job.latest_metrics or {}), steps)
    return CheckpointList(
        items=[
            CheckpointOut(
                step=a.step or 0,
                attempt=a.attempt,
                created_at=a.created_at,
                size=a.size,
                sha256=a.sha256,
                lineage=a.details,
                metrics=metrics.get(a.step or 0, {}),
                download_url=checkpoint_url(a),
                export_url=checkpoint_url(a).removesuffix("/download") + "/export",
            )
            for a in stored
        ]
    )


def list_samples(session: Session, job_id: str, principal: Principal, limit: int) -> SampleList:
    """The text the model generated at the job's latest `limit` evaluations."""
    jobs.get(session, job_id, principal)
    return SampleList(
        items=[
            SampleOut(
                step=a.step or 0,
                attempt=a.attempt,
                created_at=a.created_at,
                text=head(a, SAMPLE_TEXT_LIMIT).decode("utf-8", "replace"),
                truncated=a.size > SAMPLE_TEXT_LIMIT,
                download_url=artifact_url(a),
            )
            for a in repository.latest_of_kind(session, job_id, SAMPLE_KIND, limit)
        ]
    )


def head(artifact: Artifact, limit: int) -> bytes:
    """The artifact's first `limit` bytes, from the store (503 where it cannot be read)."""
    return read_head(artifact.sha256, artifact.size, limit, artifact.name)


def artifact_named(session: Session, job_id: str, name: str, principal: Principal) -> Artifact:
    jobs.get(session, job_id, principal)
    if not is_valid_name(name):
        raise UnprocessableError.for_field(
            "name",
            f"not an artifact name: at most {MAX_NAME_LENGTH} characters, '/'-separated "
            "parts of letters, digits, '.', '_' and '-' that start with a letter or digit",
        )
    artifact = repository.by_name(session, job_id, name)
    if artifact is None:
        raise NotFoundError(f"job {job_id} has no artifact {name}")
    return artifact


def checkpoint_at(session: Session, job_id: str, step: int, principal: Principal) -> Artifact:
    jobs.get(session, job_id, principal)
    artifact = repository.by_name(session, job_id, checkpoint_name(step))
    if artifact is None or artifact.kind != CHECKPOINT:
        raise NotFoundError(f"job {job_id} has no stored checkpoint at step {step}")
    return artifact


@dataclass(frozen=True)
class Download:
    """What to answer for one GET of an artifact's bytes."""

    status: int  # 200 | 206 | 304
    headers: dict[str, str]
    chunks: Iterator[bytes]


def download(
    artifact: Artifact,
    *,
    range_header: str | None,
    if_range: str | None,
    if_none_match: str | None,
) -> Download:
    etag = quoted_etag(artifact.sha256)
    headers = {"ETag": etag, "Accept-Ranges": "bytes", "Cache-Control": "private, no-cache"}
    if not_modified(if_none_match, etag):
        return Download(304, headers, iter(()))
    span = span_of(range_header, if_range, etag, artifact.size)
    filename = artifact.name.rsplit("/", 1)[-1]
    if artifact.kind == CHECKPOINT:
        filename += CHECKPOINT_SUFFIX
    headers |= {
        "Content-Length": str(span.length),
        "Content-Type": artifact.content_type,
        # The name's pattern leaves nothing to escape in a quoted filename.
        "Content-Disposition": f'attachment; filename="{filename}"',
    }
    if span.partial:
        headers["Content-Range"] = span.content_range(artifact.size)
    chunks = open_span(artifact.sha256, artifact.name, span)
    return Download(206 if span.partial else 200, headers, chunks)


def _columns(artifact: Artifact) -> dict[str, object]:
    return {
        "kind": artifact.kind,
        "name": artifact.name,
        "size": artifact.size,
        "sha256": artifact.sha256,
        "step": artifact.step,
        "attempt": artifact.attempt,
        "content_type": artifact.content_type,
        "created_at": artifact.created_at,
        "details": artifact.details,
    }
