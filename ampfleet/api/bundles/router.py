"""HTTP of code bundles: upload (the archive's bytes as the body, streamed), list, get, delete.

The upload route reads its body itself, so the middleware that parses JSON bodies lets it
through (`api.middleware.UPLOAD_PATHS`); its size limit is AMPFLEET_MAX_BUNDLE_BYTES."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from ampfleet.api import uploads
from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.bundles import service
from ampfleet.api.bundles.schemas import BundleDetail, BundleList
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.core.project_names import ProjectName

router = APIRouter(prefix="/v1/bundles", tags=["bundles"])

UPLOAD_BODY = uploads.upload_body("A zip or tar.gz of the code's folder (by its first bytes).")


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=BundleDetail,
    operation_id="uploadBundle",
    openapi_extra=UPLOAD_BODY,
    responses={
        200: {"model": BundleDetail, "description": "These bytes are already a bundle here."},
        **responses(401, 403, 413, 422, 503),
    },
    summary="Upload a code bundle (zip or tar.gz); the same bytes give the same bundle",
)
async def upload(
    request: Request,
    response: Response,
    session: SessionDep,
    principal: CurrentPrincipal,
    project: Annotated[ProjectName | None, Query(description="Default: the key's.")] = None,
) -> BundleDetail:
    target = project or principal.project
    await run_in_threadpool(service.check_may_upload, session, principal, target)
    with tempfile.NamedTemporaryFile(dir=uploads.spool_folder(), suffix=".part") as out:
        spooled = await uploads.spool(request, out, Path(out.name), service.upload_limit())
        bundle, created = await run_in_threadpool(service.create, session, target, spooled)
    if not created:
        response.status_code = status.HTTP_200_OK
    return bundle


@router.get(
    "",
    response_model=BundleList,
    operation_id="listBundles",
    responses=responses(401, 422),
    summary="The project's bundles, newest first (admin: every project, or ?project=)",
)
def list_bundles(
    session: SessionDep,
    principal: CurrentPrincipal,
    project: Annotated[ProjectName | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> BundleList:
    return service.list_bundles(session, principal, project, limit)


@router.get(
    "/{bundle_id}",
    response_model=BundleDetail,
    operation_id="getBundle",
    responses=responses(401, 404),
    summary="One bundle, with its file list",
)
def get_bundle(bundle_id: str, session: SessionDep, principal: CurrentPrincipal) -> BundleDetail:
    return service.detail(session, bundle_id, principal)


@router.delete(
    "/{bundle_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deleteBundle",
    responses=responses(401, 403, 404, 409),
    summary="Delete a bundle; its bytes go once nothing else names them",
)
def delete_bundle(
    bundle_id: str, session: SessionDep, principal: CurrentPrincipal, background: BackgroundTasks
) -> Response:
    sha256 = service.delete(session, bundle_id, principal)
    background.add_task(uploads.drop_object_if_unreferenced, sha256)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
