"""Bundled code started from a warm sandbox (workers/warm_sandbox.py) trains bit for bit as it
does started cold, and says how it started; a second project's attempt, warm too, finds
nothing of a hostile first one's: not in files (its folders, /tmp, home, shared memory), not
in its environment or its process's memory, no process of it left running."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from typing import Any

import psutil
import pytest

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.workers.sandbox_mounts import mount_api_problem
from tests.conftest import FleetFactory
from tests.support.archives import zip_of
from tests.support.bundles import GREETING_RECIPE
from tests.support.factories import code_spec
from tests.support.fleet import Fleet, losses, start_message, warm_sandbox_ready

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
    pytest.mark.skipif(mount_api_problem() is not None, reason=str(mount_api_problem())),
]

WARM = {"AMPFLEET_WARM_SANDBOX": "always"}
SEEDED = {"seed": 7, "stop": {"max_steps": 12}, "log_every_steps": 1, "precision": "fp32"}
WARM_IN_SANDBOX = "warm start in a sandbox made before it"


def run_bundled(fleet: Fleet, bundle: bytes, *, warm: bool, **spec: Any) -> str:
    project = spec.get("project", "default")
    uploaded = fleet.http.post("/v1/bundles", params={"project": project}, content=bundle)
    assert uploaded.status_code == 201, uploaded.text
    if warm:
        fleet.wait_until(lambda: warm_sandbox_ready(fleet), timeout=180, what="a warm sandbox")
    job = fleet.submit(code_spec(uploaded.json()["id"], spec.pop("entrypoint"), **spec))
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
    return str(job["id"])


@pytest.mark.slow  # two fleets; test_warm_start's keeps forked ranks' numbers in the short tier
def test_bundled_code_started_warm_trains_bit_for_bit_as_cold(make_fleet: FleetFactory) -> None:
    bundle = zip_of({"my_pkg/recipe.py": GREETING_RECIPE})
    spec = {"entrypoint": "my_pkg.recipe:recipe", **SEEDED}
    cold_fleet = make_fleet("embedded", extra_env={"AMPFLEET_RANK_LAUNCHER": "torchrun"})
    cold_job = run_bundled(cold_fleet, bundle, warm=False, **spec)
    cold, cold_start = losses(cold_fleet, cold_job), start_message(cold_fleet, cold_job)
    cold_fleet.stop()
    warm_fleet = make_fleet("embedded", extra_env=WARM)
    warm_job = run_bundled(warm_fleet, bundle, warm=True, **spec)
    warm, warm_start = losses(warm_fleet, warm_job), start_message(warm_fleet, warm_job)
    assert cold_start.startswith("cold start")
    assert cold_start.endswith(
        "not warm: this node starts every attempt under torchrun (AMPFLEET_RANK_LAUNCHER=torchrun)"
    )
    assert warm_start.startswith(WARM_IN_SANDBOX)
    assert len(cold) == 12
    assert warm == cold  # the same floats: same seeds, same threads, same data order


# The first tenant leaves what it can: files in its folders, /tmp, its home and /dev/shm, the
# secret in its environment and its process's memory (module state of the platform's and
# torch's), and a process of its own in a session of its own.
HOSTILE = b"""
import json
import os
import subprocess
from pathlib import Path

import torch

import ampfleet
from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count


class Hyperparameters(DigitsHyperparameters):
    secret: str


def leave(path, secret):
    try:
        Path(path).write_text(secret)
        return "left"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        left = {p: leave(p, hp.secret) for p in (
            "/tmp/secret", os.path.expanduser("~/secret"), "/dev/shm/secret",
            str(ctx.output_dir / "secret"),
        )}
        os.environ["TENANT_SECRET"] = hp.secret
        ampfleet.TENANT_SECRET = torch.TENANT_SECRET = hp.secret
        KEPT.append(bytearray(hp.secret.encode()) * 1000)
        daemon = subprocess.Popen(
            ["python3", "-c", "import time; time.sleep(900)", "tenant-a-daemon"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        report = {"left": left, "uid": os.getuid(), "daemon": daemon.pid}
        (ctx.output_dir / "report.json").write_text(json.dumps(report))
    fields = hp.model_dump(exclude={"secret"})
    return digits(DigitsHyperparameters(**fields), ctx)


KEPT = []
recipe = RecipeDefinition(
    name="hostile", description="leaves what it can, then trains digits",
    hyperparameters=Hyperparameters, build_path="tenant_a.recipe:build",
    parameter_count=parameter_count,
)
"""

# The second looks for it: the pattern of the first's secret, never the secret itself.
PROBE = rb"""
import json
import os
import re
import sys
from pathlib import Path

import torch

import ampfleet
from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count

PATTERN = re.compile(rb"tenant-a-secret-[0-9a-f]{32}")


class Hyperparameters(DigitsHyperparameters):
    first_run: str
    first_checkpoints: str


def listing(folder):
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


def memory_matches():
    found = scanned = 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if not perms.startswith("rw") or end - start > 1 << 30:
                continue
            try:
                mem.seek(start)
                span = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            found, scanned = found + len(PATTERN.findall(span)), scanned + len(span)
    return [found, scanned]


def commands():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\\0", b" ").decode())
        except OSError:
            continue
    return found


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        report = {
            "tmp": listing("/tmp"),
            "home": listing(os.path.expanduser("~")),
            "shm": listing("/dev/shm") if os.path.isdir("/dev/shm") else [],
            "first run": listing(hp.first_run),
            "first checkpoints": listing(hp.first_checkpoints),
            "environment": [k for k, v in os.environ.items() if PATTERN.search(v.encode())],
            "module state": [hasattr(ampfleet, "TENANT_SECRET"), hasattr(torch, "TENANT_SECRET")],
            "modules": [m for m in sys.modules if m.startswith("tenant_a")],
            "memory": memory_matches(),
            "daemon": [c for c in commands() if "tenant-a-daemon" in c],
            "uid": os.getuid(),
        }
        (ctx.output_dir / "report.json").write_text(json.dumps(report))
    fields = hp.model_dump(exclude={"first_run", "first_checkpoints"})
    return digits(DigitsHyperparameters(**fields), ctx)


recipe = RecipeDefinition(
    name="probe", description="looks for the first tenant, then trains digits",
    hyperparameters=Hyperparameters, build_path="tenant_b.recipe:build",
    parameter_count=parameter_count,
)
"""


def daemons() -> list[int]:
    """The first tenant's left-behind process, wherever it is on this host."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.cmdline()[-1:] == ["tenant-a-daemon"]:
                found.append(process.pid)
    return found


def report(fleet: Fleet, job_id: str) -> dict[str, Any]:
    said = fleet.http.get(f"/v1/jobs/{job_id}/artifacts/outputs/report.json")
    assert said.status_code == 200, said.text
    return dict(json.loads(said.text))


def test_a_second_project_finds_nothing_of_the_first_in_its_warm_sandbox(
    make_fleet: FleetFactory,
) -> None:
    fleet = make_fleet("embedded", extra_env=WARM)
    for project in ("alpha", "beta"):
        allowed = fleet.http.put(f"/v1/projects/{project}", json={"allow_custom_code": True})
        assert allowed.status_code == 200, allowed.text
    secret = f"tenant-a-secret-{secrets.token_hex(16)}"
    first_id = run_bundled(
        fleet,
        zip_of({"tenant_a/recipe.py": HOSTILE}),
        warm=True,
        entrypoint="tenant_a.recipe:recipe",
        project="alpha",
        resources={"procs_per_node": 1},
        stop={"max_steps": 3},
        hyperparameters={"secret": secret},
    )
    first = report(fleet, first_id)
    assert first["left"]["/tmp/secret"] == "left"  # the probes below look where it could
    assert first["daemon"] > 0
    assert daemons() == []  # it ended with the first attempt's sandbox
    data = fleet.root / "var"
    second_id = run_bundled(
        fleet,
        zip_of({"tenant_b/recipe.py": PROBE}),
        warm=True,
        entrypoint="tenant_b.recipe:recipe",
        project="beta",
        resources={"procs_per_node": 1},
        stop={"max_steps": 3},
        hyperparameters={
            "first_run": str(data / "runs" / first_id),
            "first_checkpoints": str(data / "checkpoints" / first_id),
        },
    )
    second = report(fleet, second_id)
    for job_id in (first_id, second_id):
        assert start_message(fleet, job_id).startswith(WARM_IN_SANDBOX)
    assert "secret" not in second["tmp"]
    assert "secret" not in second["home"]
    assert "secret" not in second["shm"]
    assert second["first run"].startswith("refused")
    assert second["first checkpoints"].startswith("refused")
    assert second["environment"] == []
    assert second["module state"] == [False, False]
    assert second["modules"] == []
    found, scanned = second["memory"]
    assert found == 0
    assert scanned > 50 << 20  # its heap and stacks were read: torch's objects are in them
    assert second["daemon"] == []
    assert re.fullmatch(r"tenant-a-secret-[0-9a-f]{32}", secret)  # what the probe looks for
