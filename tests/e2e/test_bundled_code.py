"""A job that runs the user's own recipe from an uploaded bundle, with real processes: the
bundle is fetched and unpacked on the node, its entrypoint imported by the ranks, its output
listed, its manifest enough to rebuild the model; an entrypoint the bundle lacks is refused
at submit, one whose import fails or wrong hyperparameters end FAILED with the reason. These fleets
run it unconfined (AMPFLEET_SANDBOX=none); tests/e2e/test_sandbox.py runs it contained."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from ampfleet.workers.training.bundled import bundled_recipe
from ampfleet.workers.training.task import RecipeContext
from tests.conftest import FleetFactory
from tests.support.archives import zip_of
from tests.support.bundles import GREETING_RECIPE
from tests.support.factories import code_spec
from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet

pytestmark = pytest.mark.e2e


@pytest.fixture(params=FLEET_CONFIGURATIONS)
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    return make_fleet(request.param, extra_env={"AMPFLEET_SANDBOX": "none"})


def test_bundled_recipe_runs_and_bad_ones_fail_with_the_reason(
    fleet: Fleet, tmp_path: Path
) -> None:
    body = zip_of(
        {
            "my_pkg/__init__.py": b"",
            "my_pkg/recipe.py": GREETING_RECIPE,
            # Binds `recipe` as far as the API can tell; only importing it fails.
            "my_pkg/broken.py": b"import not_a_package_anyone_installed\n\nrecipe = None\n",
        }
    )
    uploaded = fleet.http.post("/v1/bundles", content=body)
    assert uploaded.status_code == 201, uploaded.text
    bundle = uploaded.json()["id"]

    good = fleet.submit(
        code_spec(bundle, "my_pkg.recipe:recipe", hyperparameters={"greeting": "hi", "hidden": 24})
    )
    refused = fleet.http.post("/v1/jobs", json=code_spec(bundle, "my_pkg.nothing:recipe"))
    assert refused.status_code == 422, refused.text
    assert "no module my_pkg.nothing in bundle" in refused.json()["error"]["message"]
    broken = fleet.submit(code_spec(bundle, "my_pkg.broken:recipe"))  # 2 ranks
    wrong = fleet.submit(
        code_spec(
            bundle,
            "my_pkg.recipe:recipe",
            hyperparameters={"hidden": "wide"},
            resources={"procs_per_node": 1},
        )
    )

    done = fleet.wait_for_state(good["id"], {"SUCCEEDED"})
    assert done["progress"]["step"] == 20
    artifacts = fleet.http.get(f"/v1/jobs/{good['id']}/artifacts").json()["items"]
    names = {a["name"]: a["download_url"] for a in artifacts}
    assert "model.safetensors" in names
    assert fleet.http.get(names["outputs/greeting.txt"]).text == "hi"
    rebuild_from_the_artifacts(
        tmp_path,
        json.loads(fleet.http.get(names["manifest.json"]).content),
        fleet.http.get(names["model.safetensors"]).content,
    )

    failed = fleet.wait_for_state(broken["id"], {"FAILED"}, timeout=120)
    assert "No module named 'not_a_package_anyone_installed'" in failed["failure_reason"]
    assert "RUNNING" not in {e["to_state"] for e in fleet.events(broken["id"])}
    failed = fleet.wait_for_state(wrong["id"], {"FAILED"}, timeout=120)
    assert "hidden" in failed["failure_reason"]
    assert "ValidationError" in failed["failure_reason"]


def rebuild_from_the_artifacts(tmp_path: Path, manifest: dict[str, Any], weights: bytes) -> None:
    """The manifest holds the hyperparameters as the bundle's own model resolved them (every
    default filled in, not only what the spec gave), so the bundle and the downloaded files
    alone make the trained model again."""
    code_dir = tmp_path / "code"
    (code_dir / "my_pkg").mkdir(parents=True)
    (code_dir / "my_pkg" / "recipe.py").write_bytes(GREETING_RECIPE)
    (tmp_path / "model.safetensors").write_bytes(weights)
    try:
        recipe = bundled_recipe(code_dir, "my_pkg.recipe:recipe")
        resolved = recipe.hyperparameters(greeting="hi", hidden=24).model_dump(mode="json")
        assert manifest["hyperparameters"] == resolved
        assert manifest["spec"]["hyperparameters"] == resolved
        hyperparameters = recipe.hyperparameters.model_validate(manifest["hyperparameters"])
        context = RecipeContext(
            rank=0,
            world_size=1,
            device=torch.device("cpu"),
            seed=manifest["spec"]["seed"],
            output_dir=tmp_path / "outputs",
        )
        (tmp_path / "outputs").mkdir()
        task = recipe.build(hyperparameters, context)
        trained = load_file(str(tmp_path / "model.safetensors"))
        task.model.load_state_dict(trained)  # strictly: every key, every shape
        loaded = task.model.state_dict()
        assert all(torch.equal(loaded[name], tensor) for name, tensor in trained.items())
    finally:
        sys.path.remove(str(code_dir))
        for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
            del sys.modules[name]
