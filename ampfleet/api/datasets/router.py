"""HTTP of datasets: upload (an archive's or one file's bytes as the body, streamed), list,
get, delete. Like bundle uploads, the upload route reads its own body
(`api.middleware.UPLOAD_PATHS`); its size limit is AMPFLEET_MAX_DATASET_BYTES."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query, Request, Response, status
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool

from ampfleet.api import uploads
from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.datasets import service
from ampfleet.api.datasets.schemas import DatasetDetail, DatasetList
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.core.project_names import ProjectName
from ampfleet.core.spec import DatasetName

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

FileName = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
]

UPLOAD_BODY = uploads.upload_body(
    "A zip or tar.gz of a folder (by its first bytes), or one file's bytes with ?filename=."
)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetDetail,
    operation_id="uploadDataset",
    openapi_extra=UPLOAD_BODY,
    responses={
        200: {"model": DatasetDetail, "description": "These bytes are a version of it already."},
        **responses(401, 403, 409, 413, 422, 503),
    },
    summary="Upload a new version of a named dataset; the same bytes give the same version",
)
async def upload(
    request: Request,
    response: Response,
    session: SessionDep,
    principal: CurrentPrincipal,
    name: Annotated[DatasetName, Query(description="The dataset's name; specs say name@version.")],
    filename: Annotated[
        FileName | None, Query(description="The body is this one file, not an archive.")
    ] = None,
    project: Annotated[ProjectName | None, Query(description="Default: the key's.")] = None,
) -> DatasetDetail:
    target = project or principal.project
    principal.check_can_write(target)
    with tempfile.NamedTemporaryFile(dir=uploads.spool_folder(), suffix=".part") as out:
        spooled = await uploads.spool(request, out, Path(out.name), service.upload_limit())
        dataset, created = await run_in_threadpool(
            service.create, session, target, name, filename, spooled
        )
    if not created:
        response.status_code = status.HTTP_200_OK
    return dataset


@router.get(
    "",
    response_model=DatasetList,
    operation_id="listDatasets",
    responses=responses(401, 422),
    summary="The project's dataset versions, newest first (admin: every project, or ?project=)",
)
def list_datasets(
    session: SessionDep,
    principal: CurrentPrincipal,
    project: Annotated[ProjectName | None, Query()] = None,
    name: Annotated[DatasetName | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DatasetList:
    return service.list_datasets(session, principal, project, name, limit)


@router.get(
    "/{dataset_id}",
    response_model=DatasetDetail,
    operation_id="getDataset",
    responses=responses(401, 404),
    summary="One dataset version, with its file list",
)
def get_dataset(dataset_id: str, session: SessionDep, principal: CurrentPrincipal) -> DatasetDetail:
    return service.detail(session, dataset_id, principal)


@router.delete(
    "/{dataset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deleteDataset",
    responses=responses(401, 403, 404, 409),
    summary="Delete a dataset version; its bytes go once nothing else names them",
)
def delete_dataset(
    dataset_id: str, session: SessionDep, principal: CurrentPrincipal, background: BackgroundTasks
) -> Response:
    sha256 = service.delete(session, dataset_id, principal)
    background.add_task(uploads.drop_object_if_unreferenced, sha256)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
