"""HTTP of a job's artifacts and checkpoints: listings, and downloads streamed from the
store with Content-Length, ETag (the sha256), Range, If-Range and If-None-Match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Response
from fastapi.responses import StreamingResponse

from ampfleet.api.artifacts import service
from ampfleet.api.artifacts.schemas import ArtifactList, CheckpointList, SampleList
from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.bounds import MAX_INT
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.core.models import Artifact

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"])

RangeHeader = Annotated[
    str | None, Header(alias="Range", max_length=200, description="One range: `bytes=START-`.")
]
IfRangeHeader = Annotated[
    str | None,
    Header(alias="If-Range", max_length=200, description="The ETag of the partial copy."),
]
IfNoneMatchHeader = Annotated[str | None, Header(alias="If-None-Match", max_length=2000)]


@dataclass(frozen=True)
class Conditions:
    """What a download may be conditioned on: one range, and the client's copy's ETag."""

    range_header: str | None
    if_range: str | None
    if_none_match: str | None


def conditions(
    range_header: RangeHeader = None,
    if_range: IfRangeHeader = None,
    if_none_match: IfNoneMatchHeader = None,
) -> Conditions:
    return Conditions(range_header, if_range, if_none_match)


ConditionsDep = Annotated[Conditions, Depends(conditions)]
DOWNLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The whole object, with Content-Length and ETag (the quoted sha256).",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    },
    206: {"description": "The requested range, with Content-Range."},
    304: {"description": "If-None-Match named this ETag: the copy the client has is current."},
    **responses(401, 404, 416, 422, 503),
}


@router.get(
    "/{job_id}/artifacts",
    response_model=ArtifactList,
    operation_id="listArtifacts",
    responses=responses(401, 404),
    summary="Everything a job produced: model, manifest, checkpoints, recipe outputs",
)
def list_artifacts(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> ArtifactList:
    return service.list_artifacts(session, job_id, principal)


@router.get(
    "/{job_id}/artifacts/{name:path}",
    operation_id="downloadArtifact",
    response_class=StreamingResponse,
    responses=DOWNLOAD_RESPONSES,
    summary="Download one artifact by its name (resumable with Range)",
)
def download_artifact(
    job_id: str,
    name: Annotated[str, Path(max_length=1000, description="As listed, e.g. model.safetensors.")],
    session: SessionDep,
    principal: CurrentPrincipal,
    asked: ConditionsDep,
) -> Response:
    return _send(service.artifact_named(session, job_id, name, principal), asked)


@router.get(
    "/{job_id}/checkpoints",
    response_model=CheckpointList,
    operation_id="listCheckpoints",
    responses=responses(401, 404),
    summary="A job's stored checkpoints, with the setup each was made under",
)
def list_checkpoints(
    job_id: str, session: SessionDep, principal: CurrentPrincipal
) -> CheckpointList:
    return service.list_checkpoints(session, job_id, principal)


@router.get(
    "/{job_id}/samples",
    response_model=SampleList,
    operation_id="listSamples",
    responses=responses(401, 404, 422, 503),
    summary="What the model generated at the job's latest evaluations",
    description="A causal language model's fine-tune completes a few fixed prompts at each "
    "evaluation (`samples/step-<step>.txt` artifacts); each is shown here up to 64 KiB.",
)
def list_samples(
    job_id: str,
    session: SessionDep,
    principal: CurrentPrincipal,
    limit: Annotated[int, Query(ge=1, le=100, description="The latest this many.")] = 20,
) -> SampleList:
    return service.list_samples(session, job_id, principal, limit)


@router.get(
    "/{job_id}/checkpoints/{step}/download",
    operation_id="downloadCheckpoint",
    response_class=StreamingResponse,
    responses=DOWNLOAD_RESPONSES,
    summary="Download the checkpoint at a step: one tar of its files (resumable with Range)",
)
def download_checkpoint(
    job_id: str,
    step: Annotated[int, Path(ge=0, le=MAX_INT)],
    session: SessionDep,
    principal: CurrentPrincipal,
    asked: ConditionsDep,
) -> Response:
    return _send(service.checkpoint_at(session, job_id, step, principal), asked)


def _send(artifact: Artifact, asked: Conditions) -> Response:
    download = service.download(
        artifact,
        range_header=asked.range_header,
        if_range=asked.if_range,
        if_none_match=asked.if_none_match,
    )
    if download.status == 304:
        return Response(status_code=304, headers=download.headers)
    return StreamingResponse(download.chunks, status_code=download.status, headers=download.headers)
