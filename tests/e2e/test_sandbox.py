"""Bundled code runs in the bubblewrap sandbox: a recipe that goes looking for what it must
not see (platform credentials in its environment or pid 1's, the SQLite file, other jobs'
folders and checkpoints, the agent's processes) or write (outside its folders) finds nothing
and changes nothing, and still trains: the job SUCCEEDS and its report of what it found is
downloaded. A fork bomb meets the sandbox's task limit; a planted pickle is never loaded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import ampfleet
from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import get_settings
from tests.conftest import FleetFactory
from tests.support.archives import zip_of
from tests.support.factories import code_spec
from tests.support.fleet import start_message, warm_sandbox_ready

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
]

PROBE = b"""
import json
import os
from pathlib import Path

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count

WORDS = ("AMPFLEET", "DATABASE", "BROKER", "SECRET", "AWS", "S3_")


class Hyperparameters(DigitsHyperparameters):
    data_dir: str
    outside: str
    system: str


def attempt(action):
    try:
        return repr(action())
    except Exception as exc:
        return f"refused: {type(exc).__name__}"


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        data = Path(hp.data_dir)
        proc_one = attempt(lambda: Path("/proc/1/environ").read_bytes().decode(errors="replace"))
        report = {
            "environment": sorted(k for k in os.environ if any(w in k for w in WORDS)),
            "pid_one_credentials": any(w in proc_one for w in WORDS),
            "database_exists": (data / "ampfleet.db").exists(),
            "runs": sorted(os.listdir(data / "runs")),
            "checkpoints": sorted(os.listdir(data / "checkpoints")),
            "artifacts_exist": (data / "artifacts").exists(),
            "write_outside": attempt(lambda: Path(hp.outside).write_text("x")),
            "write_system": attempt(lambda: Path(hp.system).write_text("x")),
            "write_data_dir": attempt(lambda: (data / "planted.txt").write_text("x")),
            "uid": os.getuid(),
            "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
        }
        (ctx.output_dir / "report.json").write_text(json.dumps(report))
    fields = hp.model_dump(exclude={"data_dir", "outside", "system"})
    return digits(DigitsHyperparameters(**fields), ctx)


recipe = RecipeDefinition(
    name="probe",
    description="looks around, then trains digits",
    hyperparameters=Hyperparameters,
    build_path="probe_pkg.recipe:build",
    parameter_count=parameter_count,
)
"""


def test_a_probing_recipe_finds_and_changes_nothing_outside_its_folders(
    make_fleet: FleetFactory,
) -> None:
    fleet = make_fleet("embedded")
    data_dir = fleet.root / "var"
    outside = fleet.root / "outside.txt"
    system = Path(ampfleet.__file__).parent / "planted.txt"
    probes = {"data_dir": str(data_dir), "outside": str(outside), "system": str(system)}
    bundle = fleet.http.post("/v1/bundles", content=zip_of({"probe_pkg/recipe.py": PROBE}))
    assert bundle.status_code == 201, bundle.text
    earlier = fleet.submit(
        code_spec(
            bundle.json()["id"],
            "probe_pkg.recipe:recipe",
            resources={"procs_per_node": 1},
            hyperparameters=probes,
        )
    )
    fleet.wait_for_state(earlier["id"], {"SUCCEEDED"})
    # The earlier job started cold; the node keeps a warm sandbox from then on
    # (AMPFLEET_WARM_SANDBOX=once_used), and this one starts in it.
    fleet.wait_until(lambda: warm_sandbox_ready(fleet), timeout=180, what="a warm sandbox")
    job = fleet.submit(
        code_spec(
            bundle.json()["id"],
            "probe_pkg.recipe:recipe",
            resources={"procs_per_node": 1},
            hyperparameters=probes,
        )
    )
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    report = json.loads(fleet.http.get(f"/v1/jobs/{job['id']}/artifacts/outputs/report.json").text)
    assert start_message(fleet, earlier["id"]).endswith(
        "not warm: no warm sandbox was ready (one starts once no attempt on the node is starting)"
    )
    assert start_message(fleet, job["id"]).startswith("warm start in a sandbox made before it")
    assert report["environment"] == []
    assert report["pid_one_credentials"] is False
    assert report["database_exists"] is False
    assert report["artifacts_exist"] is False
    assert report["runs"] == [job["id"]]  # not the earlier job's folder
    assert report["checkpoints"] == [job["id"]]  # nor the earlier job's checkpoints
    assert report["write_system"].startswith("refused")  # the system is read-only
    # Never host root: a uid of the operator's range (a root worker), or one the user
    # namespace maps to the worker's own unprivileged uid.
    first = get_settings().sandbox_first_uid
    if os.geteuid() == 0:
        assert first < report["uid"] < first + get_settings().sandbox_uid_count
    else:
        assert report["uid"] == 65534
    assert report["processes"] < 20  # its own PID namespace: no agent, no other job
    assert not outside.exists()  # under /tmp: it wrote to its private /tmp, if anywhere
    assert not system.exists()
    assert not (data_dir / "planted.txt").exists()


BOMB = b"""
import os
import pickle
import time

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count


class Hyperparameters(DigitsHyperparameters):
    marker: str


class Bait:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # whoever unpickles this writes the marker
        return (open, (self.marker, "w"))


def fork_bomb(limit=10_000):
    children = []
    for _ in range(limit):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(5)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return len(children)


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        (ctx.output_dir / "bait.pkl").write_bytes(pickle.dumps(Bait(hp.marker)))
        (ctx.output_dir / "forked.txt").write_text(str(fork_bomb()))
    return digits(DigitsHyperparameters(**hp.model_dump(exclude={"marker"})), ctx)


recipe = RecipeDefinition(
    name="bomb",
    description="forks until refused, plants a pickle, then trains digits",
    hyperparameters=Hyperparameters,
    build_path="bomb_pkg.recipe:build",
    parameter_count=parameter_count,
)
"""


def test_a_fork_bomb_meets_the_task_limit_and_a_planted_pickle_is_never_loaded(
    make_fleet: FleetFactory,
) -> None:
    fleet = make_fleet(
        "embedded",
        extra_env={"AMPFLEET_SANDBOX_MAX_TASKS": "256", "AMPFLEET_WARM_SANDBOX": "always"},
    )
    marker = fleet.root / "unpickled"  # where the agent or the API could write, not a rank
    bundle = fleet.http.post("/v1/bundles", content=zip_of({"bomb_pkg/recipe.py": BOMB}))
    assert bundle.status_code == 201, bundle.text
    fleet.wait_until(lambda: warm_sandbox_ready(fleet), timeout=180, what="a warm sandbox")
    job = fleet.submit(
        code_spec(
            bundle.json()["id"],
            "bomb_pkg.recipe:recipe",
            resources={"procs_per_node": 1},
            hyperparameters={"marker": str(marker)},
        )
    )
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    # The warm sandbox's cgroup, its limit the same: the launcher's threads count in it.
    assert start_message(fleet, job["id"]).startswith("warm start in a sandbox made before it")
    outputs = f"/v1/jobs/{job['id']}/artifacts/outputs"
    forked = int(fleet.http.get(f"{outputs}/forked.txt").text)
    assert 0 < forked < 256
    limit_events = [e for e in fleet.events(job["id"]) if e["reason"] == "task_limit"]
    assert len(limit_events) == 1
    assert "limit of 256 tasks" in limit_events[0]["message"]
    # The pickle is listed and served as bytes; nothing on the platform's side loads it.
    assert fleet.http.get(f"{outputs}/bait.pkl").content.startswith(b"\x80")
    assert not marker.exists()
