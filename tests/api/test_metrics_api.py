"""Metric series: raw when small, bucketed in the database when large, with a summary."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ampfleet.core.recipes import installed_recipes
from tests.support.event_streams import read_frames
from tests.support.factories import add_series, job_spec
from tests.support.probe_recipe import install_probe


def test_large_series_is_downsampled_with_exact_bucket_statistics(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    values = [math.sin(i / 50.0) + i / 10_000 for i in range(20_000)]
    add_series(job["id"], "loss", values)
    add_series(job["id"], "val_accuracy", [0.5, 0.9, 0.8])
    body = client.get(f"/v1/jobs/{job['id']}/metrics", params={"max_points": 100}).json()
    series = {s["name"]: s for s in body["series"]}
    loss = series["loss"]
    assert loss["downsampled"] is True
    assert 50 <= len(loss["points"]) <= 100
    assert sum(p["count"] for p in loss["points"]) == 20_000
    first = loss["points"][0]
    width = loss["points"][1]["step"] - first["step"]
    chunk = values[:width]
    assert math.isclose(first["value"], sum(chunk) / len(chunk), rel_tol=1e-9)
    assert (first["min"], first["max"]) == (min(chunk), max(chunk))
    summary = loss["summary"]
    assert summary["count"] == 20_000
    assert summary["last"] == values[-1]
    assert summary["goal"] == "min"
    assert summary["best"] == min(values)
    assert summary["best_step"] == values.index(min(values)) + 1
    accuracy = series["val_accuracy"]
    assert accuracy["downsampled"] is False
    assert [p["value"] for p in accuracy["points"]] == [0.5, 0.9, 0.8]
    assert accuracy["summary"]["goal"] == "max"
    assert accuracy["summary"]["best_step"] == 2


def test_only_objectives_have_a_best(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    add_series(job["id"], "learning_rate", [3e-4, 2e-4, 1e-4])
    add_series(job["id"], "skipped_steps", [0.0, 0.0, 1.0])
    add_series(job["id"], "val_loss", [0.9, 0.4, 0.5])
    body = client.get(f"/v1/jobs/{job['id']}/metrics").json()
    summaries = {s["name"]: s["summary"] for s in body["series"]}
    for name in ("learning_rate", "skipped_steps"):
        assert summaries[name]["goal"] is None, name
        assert (summaries[name]["best"], summaries[name]["best_step"]) == (None, None), name
    assert (summaries["learning_rate"]["min"], summaries["learning_rate"]["last"]) == (1e-4, 1e-4)
    best = (summaries["val_loss"]["goal"], summaries["val_loss"]["best"])
    assert (*best, summaries["val_loss"]["best_step"]) == ("min", 0.4, 2)


@pytest.fixture
def probe_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The probe recipe, installed for this process (it declares `reward` as "max")."""
    install_probe(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed_recipes.cache_clear()
    yield
    installed_recipes.cache_clear()


def test_a_recipe_declares_which_way_its_metrics_are_better(
    probe_installed: None, client: TestClient
) -> None:
    job = client.post("/v1/jobs", json=job_spec(recipe="probe", hyperparameters={})).json()
    add_series(job["id"], "reward", [1.0, 3.0, 2.0])
    add_series(job["id"], "loss", [1.0, 3.0, 2.0])
    body = client.get(f"/v1/jobs/{job['id']}/metrics").json()
    summaries = {s["name"]: s["summary"] for s in body["series"]}
    assert (summaries["reward"]["goal"], summaries["reward"]["best"]) == ("max", 3.0)
    assert (summaries["loss"]["goal"], summaries["loss"]["best"]) == ("min", 1.0)


def test_filters_by_name_and_step_range(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    add_series(job["id"], "loss", [float(i) for i in range(100)])
    add_series(job["id"], "lr", [0.1] * 100)
    body = client.get(
        f"/v1/jobs/{job['id']}/metrics", params={"names": "loss", "from_step": 10, "to_step": 19}
    ).json()
    assert [s["name"] for s in body["series"]] == ["loss"]
    assert [p["step"] for p in body["series"][0]["points"]] == list(range(10, 20))
    bad = client.get(f"/v1/jobs/{job['id']}/metrics", params={"from_step": 5, "to_step": 1})
    assert bad.status_code == 422


def test_the_answer_names_where_the_stream_takes_over(client: TestClient) -> None:
    """A console loads the history downsampled, then follows the stream from
    `last_metric_id`: it gets the points that came after, and none of the earlier ones."""
    job = client.post("/v1/jobs", json=job_spec()).json()
    empty = client.get(f"/v1/jobs/{job['id']}/metrics").json()
    assert (empty["series"], empty["last_metric_id"]) == ([], 0)
    add_series(job["id"], "loss", [float(i) for i in range(5_000)])
    history = client.get(f"/v1/jobs/{job['id']}/metrics", params={"max_points": 100}).json()
    assert history["last_metric_id"] > 0
    add_series(job["id"], "val_accuracy", [0.5, 0.75])  # lands after the history was read
    client.post(f"/v1/jobs/{job['id']}/cancel")
    cursor = {"Accept": "text/event-stream", "Last-Event-ID": f"0:{history['last_metric_id']}"}
    frames = read_frames(client, job["id"], cursor)
    points = [p for f in frames if f["event"] == "metrics" for p in f["data"]["points"]]
    assert [(p["name"], p["step"]) for p in points] == [("val_accuracy", 1), ("val_accuracy", 2)]
