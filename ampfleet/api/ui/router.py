"""The web console: static ES modules and CSS served under /ui.

Loading the console needs no key; every API call it makes carries the key the user typed in
(kept in the tab's sessionStorage), so it sees exactly what that key may see.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).parent / "static"
PREFIX = "/ui"

# The console renders API data with textContent only; the policy keeps it that way: no
# inline scripts, nothing loaded from another origin, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate (a cheap 304) so a new release is picked up on the next load.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get(PREFIX)
def console() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/")


@router.get("/favicon.ico")
def favicon() -> FileResponse:
    """Browsers ask the origin's root for it, whatever page they show."""
    return FileResponse(
        STATIC_DIR / "favicon.ico", media_type="image/x-icon", headers=SECURITY_HEADERS
    )


class ConsoleFiles(StaticFiles):
    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(SECURITY_HEADERS)
        return response


def mount_console(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(PREFIX, ConsoleFiles(directory=STATIC_DIR, html=True), name="console")
