"""ampfleet: training-as-a-service backend.

`from ampfleet import Client` (or `AsyncClient`) is the Python SDK; it is imported on first
use, so what imports this package without it (training ranks, the API app) does not load it.
Nor do the server commands of `ampfleet` (api, scheduler, worker, up, migrate...): the CLI
loads its client commands, and the SDK with them, only when one of those is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ampfleet.sdk import AsyncClient, Client

__version__ = "0.1.0"
__all__ = ["AsyncClient", "Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Client", "AsyncClient"):
        from ampfleet import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'ampfleet' has no attribute {name!r}")
