"""The sweeps pages in headless Chromium, against the fleet of conftest.py: a small digits
sweep (2 trials of 20 steps at once, over learning rate and precision) followed from the
list to its page while it runs and after it ends, each part of the page checked against
the API's answer; a sweep whose trials cannot start, cancelled from its page; and the
Pareto front of a sweep over two objectives, drawn from an answer of the API's shape."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.factories import job_spec
from tests.support.fleet import Fleet
from tests.ui.console import log_in, save_screenshot

pytestmark = [pytest.mark.ui, pytest.mark.e2e]

BEST_SHADE, WORST_SHADE = "#3b0764", "#f59e0b"  # the ends of sweepcharts.js's colour scale


def digits_sweep(**overrides: Any) -> dict[str, Any]:
    base = job_spec(
        resources={"procs_per_node": 1},
        precision="fp32",
        allreduce_dtype="fp32",
        stop={"max_steps": 20},
        eval_every_steps=10,
        log_every_steps=5,
        hyperparameters={"hidden": 64, "batch_size": 128},
    )
    spec = {
        "name": "ui-digits",
        "base": base,
        "space": {
            "learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 3e-2},
            "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
        },
        # Both precisions for sure (the precision report), a learning rate apart.
        "start_with": [
            {"learning_rate": 3e-3, "precision": "fp32"},
            {"learning_rate": 1e-4, "precision": "bf16"},
        ],
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "sampler": {"type": "random", "seed": 5},
        "budget": {"max_trials": 2, "max_concurrent": 2},
    }
    return {**spec, **overrides}


def start(fleet: Fleet, spec: dict[str, Any]) -> str:
    response = fleet.http.post("/v1/sweeps", json=spec)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def attribute(locator: Locator, name: str) -> list[str]:
    return [str(v) for v in locator.evaluate_all(f"els => els.map(e => e.getAttribute('{name}'))")]


def tradeoff_front(trials: list[dict[str, Any]]) -> set[str]:
    """Trial numbers no other trial beats on both samples/s and val_accuracy."""
    points = [(t["measures"]["samples_per_s"], t["values"][0], t["number"]) for t in trials]
    return {
        str(n)
        for x, y, n in points
        if not any(qx >= x and qy >= y and (qx, qy) != (x, y) for qx, qy, _ in points)
    }


def test_a_sweeps_page_shows_its_trials_charts_report_and_best_model(
    fleet: Fleet, page: Page, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_id = start(fleet, digits_sweep())
    log_in(page, fleet, "#/sweeps")
    listed = page.locator(f"#sweeps-table tr[data-sweep='{sweep_id}']")
    expect(listed).to_contain_text("ui-digits")
    listed.click()
    expect(page).to_have_url(re.compile(f"#/sweeps/{sweep_id}$"))
    # While it runs: Cancel offered, trials appearing as the controller asks for them.
    expect(page.locator("#sweep-state")).to_have_attribute("data-state", "RUNNING")
    expect(page.locator("#cancel-sweep")).to_be_visible()
    expect(page.locator("#trials tr[data-state='running']").first).to_be_visible()

    # The page polls until the sweep has ended: no reload.
    state = page.locator("#sweep-state")
    expect(state).to_have_attribute("data-state", "SUCCEEDED", timeout=240_000)
    expect(page.locator("#cancel-sweep")).to_be_hidden()
    sweep = fleet.http.get(f"/v1/sweeps/{sweep_id}").json()
    trials = sweep["trials"]
    complete = [t for t in trials if t["state"] == "complete"]
    assert len(trials) == 2
    assert complete, trials
    expect(page.locator("#trials tr[data-state='running']")).to_have_count(0)
    expect(page.locator("[data-field='trials']")).to_have_text(f"{len(complete)} complete")

    # The trials table: parameters, value, state, reason, a link to each trial's job.
    for trial in trials:
        row = page.locator(f"#trials tr[data-trial='{trial['number']}']")
        expect(row.locator("td.param[data-param='precision']")).to_have_text(
            trial["params"]["precision"]
        )
        expect(row.locator("td.state")).to_have_text(trial["state"])
        expect(row.locator("td.reason")).to_have_text(trial["reason"] or "")
        link = row.locator("td.job a")
        expect(link).to_have_attribute("href", f"#/jobs/{trial['job_id']}")
        value = row.locator("td.value[data-objective='val_accuracy']").get_attribute("data-value")
        assert ([float(value)] if value else None) == trial["values"]
    best = sweep["best_trial"]
    expect(page.locator("#trials tr[data-best='true']")).to_have_attribute(
        "data-trial", str(best["number"])
    )

    # The objective by trial number, and the best so far.
    dots = page.locator("#chart-objective g[data-series='objective'] circle")
    assert attribute(dots, "data-x") == [str(t["number"]) for t in complete]
    assert [float(y) for y in attribute(dots, "data-y")] == [t["values"][0] for t in complete]
    best_line = page.locator("#chart-objective polyline[data-series='best']")
    expect(best_line).to_have_attribute("data-points", str(len(complete)))

    # Quality against throughput: every complete trial, the front highlighted.
    points = page.locator("#chart-tradeoff circle.trial-point")
    expect(points).to_have_count(len(complete))
    front = page.locator("#chart-tradeoff circle.trial-point[data-front='true']")
    assert set(attribute(front, "data-trial")) == tradeoff_front(complete)
    assert str(best["number"]) in attribute(front, "data-trial")  # the best is on it

    # The parameters in parallel coordinates, coloured by the objective.
    axes = page.locator("#chart-parallel line[data-axis]")
    assert attribute(axes, "data-axis") == ["learning_rate", "precision", "val_accuracy"]
    expect(page.locator("#chart-parallel polyline.trial-line")).to_have_count(2)
    best_trace = page.locator(f"#chart-parallel polyline[data-trial='{best['number']}']")
    expect(best_trace).to_have_attribute("stroke", BEST_SHADE)
    worst = min(complete, key=lambda t: t["values"][0])
    if worst["values"][0] < best["values"][0]:
        worst_trace = page.locator(f"#chart-parallel polyline[data-trial='{worst['number']}']")
        expect(worst_trace).to_have_attribute("stroke", WORST_SHADE)

    # The precision report, a row per precision that complete trials ran in.
    report = page.locator("#precision-report tbody tr")
    precisions = [r["precision"] for r in sweep["precision_report"]]
    assert attribute(report, "data-precision") == precisions
    jobs = {t["number"]: t["job_id"] for t in trials}
    for row in sweep["precision_report"]:
        shown = page.locator(f"#precision-report tr[data-precision='{row['precision']}']")
        expect(shown.locator("td.trials")).to_have_text(f"{row['trials']} ({row['complete']})")
        expect(shown.locator("td.trial a")).to_have_attribute(
            "href", f"#/jobs/{jobs[row['trial']]}"
        )
        expect(shown.locator("td.outcome")).to_contain_text(row["state"])

    # The best trial, and its model downloaded as the job lists it.
    winner = page.locator("#best-trial .winner")
    expect(winner).to_have_attribute("data-trial", str(best["number"]))
    expect(winner.locator("a.job-link")).to_have_attribute("href", f"#/jobs/{best['job_id']}")
    with page.expect_download() as download:
        winner.locator("button.download-model").click()
    saved = tmp_path / "model.safetensors"
    download.value.save_as(saved)
    (listed_model,) = [
        a
        for a in fleet.http.get(f"/v1/jobs/{best['job_id']}/artifacts").json()["items"]
        if a["name"] == "model.safetensors"
    ]
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == listed_model["sha256"]
    header_length = int.from_bytes(saved.read_bytes()[:8], "little")
    assert json.loads(saved.read_bytes()[8 : 8 + header_length])  # a safetensors header
    save_screenshot(page, "sweep-page.png", capsys)

    page.click("a.back")
    expect(listed).to_have_attribute("data-state", "SUCCEEDED")
    expect(listed.locator(".counts")).to_have_text(f"{len(complete)} complete")


def test_a_sweep_is_cancelled_from_its_page(fleet: Fleet, page: Page) -> None:
    project = "ui-sweep-parked"
    parked = fleet.http.put(f"/v1/projects/{project}", json={"max_slots": 0})
    assert parked.status_code == 200, parked.text
    sweep_id = start(fleet, digits_sweep(name="ui-parked", project=project))
    log_in(page, fleet, f"#/sweeps/{sweep_id}")
    expect(page.locator("#sweep-state")).to_have_attribute("data-state", "RUNNING")
    expect(page.locator("#trials tr[data-trial]")).to_have_count(2)  # both at once, queued
    page.click("#cancel-sweep")
    page.click("#keep-sweep")
    expect(page.locator("#sweep-state")).to_have_attribute("data-state", "RUNNING")
    page.click("#cancel-sweep")
    page.click("#confirm-cancel-sweep")
    expect(page.locator("#sweep-state")).to_have_attribute("data-state", "CANCELLED")
    expect(page.locator("#cancel-sweep")).to_be_hidden()
    expect(page.locator("#sweep-notice")).to_contain_text("cancelled")
    # Its trials' jobs stop after it; the page keeps reading until they have.
    cancelled = page.locator("#trials tr[data-state='cancelled']")
    expect(cancelled).to_have_count(2, timeout=60_000)
    expect(cancelled.first.locator("td.reason")).to_have_text("its job was cancelled")
    expect(page.locator("[data-field='reason']")).to_have_text("cancelled")
    expect(page.locator("#best-trial")).to_have_text("No complete trial yet.")


# A sweep over two objectives as GET /v1/sweeps/{id} answers it: trial 2 is both faster and
# more accurate than trial 1; 0 and 2 trade speed for accuracy; 3 was pruned.
TWO_OBJECTIVES = {
    "spec": {
        "space": {"precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"]}},
        "objectives": [
            {"metric": "val_accuracy", "direction": "maximize", "reduce": "last"},
            {"metric": "samples_per_s", "direction": "maximize", "reduce": "mean"},
        ],
    },
    "trials": [
        {
            "number": n,
            "job_id": f"job_{n}",
            "state": state,
            "params": {"precision": p},
            "values": values,
            "reason": None,
            "measures": {"samples_per_s": speed},
        }
        for n, p, state, values, speed in [
            (0, "fp32", "complete", [0.9, 500.0], 500.0),
            (1, "bf16", "complete", [0.8, 700.0], 700.0),
            (2, "fp16", "complete", [0.85, 900.0], 900.0),
            (3, "bf16", "pruned", None, 650.0),
        ]
    ],
    "best_trial": None,
    "precision_report": [],
}
DRAW = """async (sweep) => {
  const { bestPanel, drawParallel, drawTradeoff } = await import("./js/pages/sweepresults.js");
  sweep.pareto_front = sweep.trials.filter((t) => [0, 2].includes(t.number));
  const chart = document.createElement("div");
  drawTradeoff(chart, sweep);
  const lines = document.createElement("div");
  drawParallel(lines, sweep);
  const best = bestPanel({ signal: new AbortController().signal });
  best.draw(sweep);
  const numbers = (root, selector, name) =>
    [...root.querySelectorAll(selector)].map((el) => el.getAttribute(name));
  return {
    front: numbers(chart, "circle[data-front='true']", "data-trial").sort(),
    points: numbers(chart, "circle.trial-point", "data-trial").length,
    title: best.el.querySelector("h2").textContent,
    winners: numbers(best.el, ".winner", "data-trial"),
    dashed: numbers(lines, "polyline[stroke-dasharray]", "data-trial"),
  };
}"""


def test_several_objectives_show_the_pareto_front(fleet: Fleet, page: Page) -> None:
    page.goto(f"{fleet.base_url}/ui/")
    drawn = page.evaluate(DRAW, TWO_OBJECTIVES)
    assert drawn["front"] == ["0", "2"]  # trial 1 is beaten by 2 on both axes
    assert drawn["points"] == 3  # a pruned trial has no values
    assert drawn["title"] == "Pareto front"
    assert drawn["winners"] == ["0", "2"]
    assert drawn["dashed"] == ["3"]  # no value: drawn grey and dashed
