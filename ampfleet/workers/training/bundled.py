"""A rank's import of the user's recipe from an unpacked bundle.

The bundle's tree goes first on `sys.path` and the entrypoint (`package.module:attribute`)
must name a `RecipeDefinition`, the same contract as an installed recipe. Whatever is wrong
raises with a sentence the user can act on; the rank records it and the job ends FAILED
(a deterministic error: retrying would fail again).
"""

from __future__ import annotations

import sys
from importlib import import_module
from pathlib import Path

from ampfleet.core.recipes import RecipeDefinition


class BundleEntrypointError(LookupError):
    """The entrypoint names nothing usable in the bundle."""


def bundled_recipe(code_dir: Path, entrypoint: str) -> RecipeDefinition:
    sys.path.insert(0, str(code_dir))
    module_name, _, attribute = entrypoint.partition(":")
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the bundle's own code imports something missing: its own message
        top = sorted(p.name for p in code_dir.iterdir() if not p.name.startswith("."))[:20]
        raise BundleEntrypointError(
            f"entrypoint {entrypoint}: no module {exc.name} in the bundle "
            f"(its top level holds: {', '.join(top) or 'nothing'})"
        ) from None
    definition = getattr(module, attribute, None)
    if definition is None:
        raise BundleEntrypointError(f"entrypoint {entrypoint}: {module_name} has no {attribute}")
    if not isinstance(definition, RecipeDefinition):
        raise BundleEntrypointError(
            f"entrypoint {entrypoint} is a {type(definition).__name__}, not a RecipeDefinition"
        )
    if ":" not in definition.build_path:
        raise BundleEntrypointError(
            f"entrypoint {entrypoint}: build_path must be 'module:function'"
        )
    return definition
