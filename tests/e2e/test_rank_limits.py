"""What a rank of a real job sees: an allow-listed environment without any platform credential,
its slot's share of the node's cores as its threads, and a memory limit of its slot's share,
whose breach the job reports as an out-of-memory failure. Admission sizes jobs against the
memory the node registered, and the API process that served all of it never loaded torch."""

from __future__ import annotations

from pathlib import Path

from ampfleet.workers.launch import threads_per_rank
from tests.support.fleet import Fleet, FleetFactory
from tests.support.probe_recipe import ENV_LINE_PREFIX, THREADS_LINE_PREFIX, install_probe

NODE_MEMORY_MB = 3000  # two slots: each rank may use 1,500 MB


def _rank_lines(fleet: Fleet, job_id: str, prefix: str) -> list[str]:
    lines = fleet.http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 1000}).json()["items"]
    return [line["line"].removeprefix(prefix) for line in lines if line["line"].startswith(prefix)]


def _rank_environment(fleet: Fleet, job_id: str) -> dict[str, str]:
    pairs = [line.partition("=") for line in _rank_lines(fleet, job_id, ENV_LINE_PREFIX)]
    return {name: value for name, _, value in pairs}


def _probe(**hyperparameters: int) -> dict[str, object]:
    return {"recipe": "probe", "hyperparameters": hyperparameters, "stop": {"max_steps": 3}}


def test_ranks_get_no_credential_and_only_their_memory_share(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = make_fleet(
        "postgres+redis",
        extra_env={
            "PYTHONPATH": install_probe(tmp_path / "probe-site"),
            "AMPFLEET_NODE_MEMORY_MB": str(NODE_MEMORY_MB),
        },
    )
    node = fleet.http.get("/v1/nodes").json()["items"][0]
    assert node["memory_mb"] == NODE_MEMORY_MB

    job = fleet.submit(_probe())
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    seen = _rank_environment(fleet, job["id"])
    assert {"PATH", "PYTHONPATH", "OMP_NUM_THREADS", "RANK", "WORLD_SIZE"} <= set(seen)
    # One rank, and the node has two slots: another job's rank may run beside it, so it
    # computes on half the cores, not all of them (oversubscribed, each ran ~7x slower).
    share = str(threads_per_rank(2))
    assert seen["OMP_NUM_THREADS"] == share
    assert _rank_lines(fleet, job["id"], THREADS_LINE_PREFIX) == [share]
    assert [name for name in seen if name.startswith("AMPFLEET_")] == []
    credentials = [fleet.env[f"AMPFLEET_{name}"] for name in ("SECRET_KEY", "DATABASE_URL")]
    assert [v for v in seen.values() if any(c in v for c in credentials)] == []

    hog = fleet.submit(_probe(allocate_mb=NODE_MEMORY_MB // 2 + 200))
    failed = fleet.wait_for_state(hog["id"], {"FAILED"})
    assert "ran out of memory" in failed["failure_reason"]
    assert "its limit of 1,500 MB" in failed["failure_reason"]

    too_large = {"d_model": 2048, "n_layers": 8, "n_heads": 16}
    refused = fleet.http.post(
        "/v1/jobs", json={"recipe": "gpt-bench", "hyperparameters": too_large}
    )
    assert refused.status_code == 422, refused.text
    assert "1,500 MB per slot" in refused.json()["error"]["message"]

    assert fleet.http.get("/v1/recipes").status_code == 200
    assert fleet.http.get("/v1/recipes/probe").status_code == 200
    api_maps = Path(f"/proc/{fleet.processes['api'].pid}/maps").read_text()
    assert "torch" not in api_maps, "the API process loaded torch"
