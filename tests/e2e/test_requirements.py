"""A bundle's `code.requirements`: installed once per node into an environment over the
worker's (from a wheel the test builds, through the operator's pip options: no index), seen
by the recipe, reused by the next job of the same set; one that does not install ends the
job FAILED within a minute, with pip's message as the reason and pip's output in its logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FleetFactory
from tests.support.archives import build_wheel, zip_of
from tests.support.factories import code_spec
from tests.support.fleet import Fleet

pytestmark = pytest.mark.e2e

RECIPE = b"""
from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count


def build(hp, ctx):
    import tinydep
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        (ctx.output_dir / "tinydep.txt").write_text(tinydep.GREETING)
    return digits(hp, ctx)


recipe = RecipeDefinition(
    name="needs-tinydep",
    description="digits, and a package from code.requirements",
    hyperparameters=DigitsHyperparameters,
    build_path="dep_pkg.recipe:build",
    parameter_count=parameter_count,
)
"""


def requirement_lines(fleet: Fleet, job_id: str) -> list[str]:
    lines = fleet.http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 1000}).json()["items"]
    return [line["line"] for line in lines if line["line"].startswith("[requirements]")]


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_requirements_install_once_and_a_failed_install_fails_the_job(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels)
    fleet = make_fleet(
        "embedded", extra_env={"AMPFLEET_PIP_ARGS": f"--no-index --find-links {wheels}"}
    )
    body = zip_of({"dep_pkg/__init__.py": b"", "dep_pkg/recipe.py": RECIPE})
    bundle = fleet.http.post("/v1/bundles", content=body).json()["id"]

    def submit(requirements: list[str]) -> dict:
        code = code_spec(bundle, "dep_pkg.recipe:recipe", resources={"procs_per_node": 1})
        code["code"]["requirements"] = requirements
        return fleet.submit(code)

    first = submit(["tinydep==0.1"])
    fleet.wait_for_state(first["id"], {"SUCCEEDED"})
    greeting = fleet.http.get(f"/v1/jobs/{first['id']}/artifacts/outputs/tinydep.txt")
    assert greeting.text == "hello from tinydep"
    installed = requirement_lines(fleet, first["id"])
    assert any("Successfully installed tinydep-0.1" in line for line in installed), installed

    again = submit(["tinydep==0.1"])
    fleet.wait_for_state(again["id"], {"SUCCEEDED"})
    assert requirement_lines(fleet, again["id"]) == []  # the node's environment, reused

    broken = submit(["tinydep==9.9"])
    failed = fleet.wait_for_state(broken["id"], {"FAILED"}, timeout=60)
    assert "code.requirements did not install" in failed["failure_reason"]
    assert "tinydep==9.9" in failed["failure_reason"]
    assert any("ERROR" in line for line in requirement_lines(fleet, broken["id"]))
