"""OPTIONS for every API path: 204, with every method the path takes in `Allow`.

Starlette matches one route per request, and each route has its own methods: for OPTIONS
it answered 405 naming only the methods of the first route with that path (`GET /v1/jobs`
and `POST /v1/jobs` are two routes). A CORS preflight, when CORS is configured, is
answered by the CORS middleware before the request gets here.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Receive, Scope, Send

PROBED = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class OptionsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            await self.app(scope, receive, send)
            return
        methods = path_methods(scope)
        if not methods:  # no such path, or the console's files: as for any other method
            await self.app(scope, receive, send)
            return
        allow = ", ".join(sorted(methods | {"OPTIONS"}))
        await Response(status_code=204, headers={"Allow": allow})(scope, receive, send)


def path_methods(scope: Scope) -> set[str]:
    """The methods some route takes at the request's path, found by asking each route
    (included routers, too) whether it would take the request with that method."""
    return {method for method in PROBED if _taking(scope, method)}


def path_template(scope: Scope) -> str | None:
    """The template of a route that takes the request's path with some method: what an
    OPTIONS request (ours, or a CORS preflight) or a 405 is about, though no route ran."""
    for method in PROBED:
        if routes := _taking(scope, method):
            return str(getattr(routes[0], "path", scope["path"]))
    return None


def _taking(scope: Scope, method: str) -> list[BaseRoute]:
    if "app" not in scope:
        return []
    routes = [route for route in scope["app"].router.routes if not isinstance(route, Mount)]
    return [r for r in routes if r.matches({**scope, "method": method})[0] is Match.FULL]
