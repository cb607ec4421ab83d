"""The FastAPI application."""

from __future__ import annotations

import gc

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from ampfleet import __version__
from ampfleet.api.artifacts.router import router as artifacts_router
from ampfleet.api.bundles.router import router as bundles_router
from ampfleet.api.console_login.router import router as console_login_router
from ampfleet.api.datasets.router import router as datasets_router
from ampfleet.api.diagnosis.router import router as diagnosis_router
from ampfleet.api.errors import install_error_handlers
from ampfleet.api.health.router import router as health_router
from ampfleet.api.inflight import KeyInFlightLimitMiddleware
from ampfleet.api.jobs.router import router as jobs_router
from ampfleet.api.keys.router import router as keys_router
from ampfleet.api.logs.router import router as logs_router
from ampfleet.api.metrics.router import router as metrics_router
from ampfleet.api.middleware import (
    BodySizeLimitMiddleware,
    JsonDepthLimitMiddleware,
    NulCharacterGuardMiddleware,
)
from ampfleet.api.middleware_request import RequestContextMiddleware
from ampfleet.api.nodes.router import router as nodes_router
from ampfleet.api.openapi import install_openapi, operation_id
from ampfleet.api.options import OptionsMiddleware
from ampfleet.api.profiles.router import router as profiles_router
from ampfleet.api.projects.router import router as projects_router
from ampfleet.api.queue.router import router as queue_router
from ampfleet.api.recipes.router import router as recipes_router
from ampfleet.api.request_traces import trace_requests
from ampfleet.api.sweeps.router import router as sweeps_router
from ampfleet.api.ui.router import mount_console
from ampfleet.api.webhooks.router import router as webhooks_router
from ampfleet.core.db import get_read_sessionmaker, get_sessionmaker
from ampfleet.core.recipes import installed_recipes
from ampfleet.core.settings import get_settings


def create_app() -> FastAPI:
    settings = get_settings()
    # Load entry points now, so a broken recipe package fails at start; they are the
    # recipes' torch-free definitions (only ranks import `build`).
    installed_recipes()
    # Build the engines now, once: left to the first requests, several threadpool threads
    # would each build one (lru_cache does not serialise misses) and all but one be lost.
    get_sessionmaker()
    get_read_sessionmaker()
    app = FastAPI(
        title="ampfleet",
        version=__version__,
        description="Submit PyTorch training jobs; they run as distributed mixed-precision "
        "training on the fleet; poll or stream their state, events and metrics.",
        generate_unique_id_function=operation_id,
    )
    install_error_handlers(app)
    app.add_middleware(OptionsMiddleware)  # inside CORS, which answers preflights first
    app.add_middleware(NulCharacterGuardMiddleware)
    # Outside the NUL guard, which parses the body; inside the size limit, which bounds it.
    app.add_middleware(JsonDepthLimitMiddleware, max_depth=settings.max_json_depth)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Outside everything that parses or looks up; inside CORS, so a browser can read its 429.
    app.add_middleware(KeyInFlightLimitMiddleware, limit=settings.max_requests_in_flight_per_key)
    if settings.cors_origins:  # off unless configured: the console is same-origin
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        )
    app.add_middleware(RequestContextMiddleware)  # outermost: ids every request
    app.include_router(health_router)
    app.include_router(jobs_router)
    app.include_router(sweeps_router)
    app.include_router(metrics_router)
    app.include_router(diagnosis_router)
    app.include_router(profiles_router)
    app.include_router(logs_router)
    app.include_router(artifacts_router)
    app.include_router(bundles_router)
    app.include_router(datasets_router)
    app.include_router(nodes_router)
    app.include_router(queue_router)
    app.include_router(recipes_router)
    app.include_router(projects_router)
    app.include_router(keys_router)
    app.include_router(console_login_router)
    app.include_router(webhooks_router)
    mount_console(app)
    install_openapi(app)
    trace_requests(app)  # its span encloses every middleware: the access log line is in it
    return app


def create_serving_app() -> FastAPI:
    """The app of an API server process (`ampfleet api`): `create_app`, then everything
    alive at that point (modules, routes, models, recipes: about 155,000 objects) moved out
    of the garbage collector's sight (`gc.freeze`). They live as long as the process, and
    requests allocate enough that full collections keep coming round, each of which walked
    all of them again (BENCHMARKS.md, "API"). Not in `create_app`, which tests call many
    times in one process."""
    app = create_app()
    gc.collect()  # what start-up left as garbage goes now, not frozen with the rest
    gc.freeze()
    return app
