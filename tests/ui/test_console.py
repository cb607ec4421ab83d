"""The web console (/ui) in headless Chromium, against a real fleet: api, scheduler and one
worker node, each a real process, on PostgreSQL and Redis (conftest.py)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Request, expect

from ampfleet.sdk import Client
from tests.support.archives import zip_of
from tests.support.factories import job_spec
from tests.support.fleet import TERMINAL, Fleet
from tests.support.hf_models import echo_task, tiny_model_folder
from tests.ui.console import log_in, mark, save_screenshot, still_marked

pytestmark = [pytest.mark.ui, pytest.mark.e2e]

LONG = 1_000_000  # steps: a job that runs until it is cancelled
PAGE = 50  # rows the jobs list and the fleet's queue show before "Older"/"Later jobs"


def cancel_quietly(fleet: Fleet, job_id: str) -> None:
    """Ends a job a test is done with: CANCELLED, or the end it reached on its own before
    the cancel did (a job that fails at once may go CANCELLING -> FAILED)."""
    fleet.http.post(f"/v1/jobs/{job_id}/cancel")
    fleet.wait_for_state(job_id, TERMINAL, timeout=60)


def test_console_loads_without_a_key_and_logs_in_with_one(fleet: Fleet, page: Page) -> None:
    anonymous = httpx.get(f"{fleet.base_url}/ui", follow_redirects=True)
    assert anonymous.status_code == 200
    assert "text/html" in anonymous.headers["content-type"]
    assert "default-src 'self'" in anonymous.headers["content-security-policy"]
    assert httpx.get(f"{fleet.base_url}/ui/js/app.js").status_code == 200
    assert httpx.get(f"{fleet.base_url}/v1/jobs").status_code == 401  # the API still needs one
    for icon in ("/favicon.ico", "/ui/favicon.ico"):  # what browsers ask for, and the link
        answer = httpx.get(f"{fleet.base_url}{icon}")
        assert answer.status_code == 200, icon
        assert answer.content.startswith(b"\x00\x00\x01\x00")  # an ICO

    page.goto(f"{fleet.base_url}/ui/")
    expect(page.locator("#login-form")).to_be_visible()
    page.fill("#api-key", "amp_not_a_key")
    page.click("#login-submit")
    expect(page.locator("#error .error-code")).to_have_text("unauthorized")
    expect(page.locator("#error")).to_contain_text("not valid")
    expect(page.locator("#login-form")).to_be_visible()

    page.fill("#api-key", fleet.admin_key)
    page.click("#login-submit")
    expect(page.locator("#jobs-table")).to_be_visible()
    expect(page.locator("#error")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('ampfleet.apiKey')") == fleet.admin_key
    page.reload()  # the key lasts for the browser session
    expect(page.locator("#jobs-table")).to_be_visible()
    expect(page.locator("#login-form")).to_have_count(0)


def test_api_errors_show_their_code_and_message(fleet: Fleet, page: Page) -> None:
    log_in(page, fleet, "#/jobs/job_00000000000000000000000000")
    expect(page.locator("#error .error-code")).to_have_text("not_found")
    expect(page.locator("#error")).to_contain_text("HTTP 404")
    expect(page.locator("#job-missing")).to_be_visible()


def test_sse_parser_reassembles_frames_split_across_chunks(fleet: Fleet, page: Page) -> None:
    page.goto(f"{fleet.base_url}/ui/")
    chunks = [
        "id: 1:2\nevent: prog",
        'ress\ndata: {"a":',
        "1}\n\n",
        ": keep-alive\n\n",
        "id: 3:4\r",  # a CR that may be half of a CRLF
        "\nevent: end\r\ndata: x\r\n",
        "data: y\r\n\r\n",
        "event: logs\ndata: z\n\n",
    ]
    frames = page.evaluate(
        """async (chunks) => {
            const { SseParser } = await import("./js/sse.js");
            const frames = [];
            const parser = new SseParser((frame) => frames.push(frame));
            for (const chunk of chunks) parser.push(chunk);
            return frames;
        }""",
        chunks,
    )
    assert frames == [
        {"event": "progress", "data": '{"a":1}', "id": "1:2"},
        {"event": "end", "data": "x\ny", "id": "3:4"},
        {"event": "logs", "data": "z", "id": "3:4"},  # the last id seen holds until replaced
    ]


def test_job_page_follows_a_run_to_success_with_live_charts(
    fleet: Fleet, page: Page, capsys: pytest.CaptureFixture[str]
) -> None:
    job = fleet.submit(job_spec(name="ui-success", stop={"max_steps": 150}, eval_every_steps=50))
    log_in(page, fleet)
    row = page.locator(f"#jobs-table tr[data-job='{job['id']}']")
    expect(row).to_be_visible()
    expect(row.locator(".project")).to_have_text("default")
    expect(row.locator(".precision")).to_contain_text("bf16")
    expect(row.locator(".allreduce")).to_have_text("bf16")
    row.click()
    expect(page).to_have_url(re.compile(f"#/jobs/{job['id']}$"))

    expect(page.locator("#job-state")).to_have_attribute("data-state", "SUCCEEDED", timeout=150_000)
    expect(page.locator("#progress-text")).to_contain_text("step 150 of 150")
    for state in ("QUEUED", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"):
        expect(page.locator(f"#timeline li.transition[data-to='{state}']")).to_have_count(1)

    loss = page.locator("#chart-loss polyline.series[data-series='loss']")
    expect(loss).to_have_count(1)
    # Logged every 10 steps: at least 10 points, once the chart has drawn what the metrics
    # stream brings (it may land after the state's own stream says SUCCEEDED).
    expect(loss).to_have_attribute("data-points", re.compile(r"^(?:[1-9]\d+)$"))
    assert len((loss.get_attribute("points") or "").split()) >= 10
    expect(page.locator("#chart-loss polyline.series[data-series='val_loss']")).to_have_count(1)
    expect(page.locator("#chart-validation polyline[data-series='val_accuracy']")).to_have_count(1)
    bars = page.locator("#chart-step-time rect.bar-seg")
    assert bars.count() >= 5 * 10
    assert set(bars.evaluate_all("rects => rects.map(r => r.dataset.key)")) == {
        "time_data_s",
        "time_forward_s",
        "time_backward_s",
        "time_allreduce_exposed_s",
        "time_optimizer_s",
    }
    expect(page.locator("#chart-grad-norm polyline[data-series='grad_norm']")).to_have_count(1)
    # The node agent's telemetry of each rank (CPU ranks: CPU and resident memory), and MFU.
    expect(page.locator("#chart-utilisation")).to_have_attribute("data-kind", "cpu_percent")
    expect(page.locator("#chart-memory")).to_have_attribute("data-kind", "rss_mb")
    for rank in (0, 1):
        for chart, series in (("utilisation", "cpu_percent"), ("memory", "rss_mb")):
            line = f"#chart-{chart} polyline[data-series='{series}_rank{rank}']"
            expect(page.locator(line)).to_have_count(1)
    expect(page.locator("#chart-mfu polyline[data-series='mfu']")).to_have_count(1)
    expect(page.locator("#amp-skipped")).to_have_text("0")
    expect(page.locator("#allreduce-dtype")).to_have_text("bf16")
    expect(page.locator("#allreduce")).to_have_attribute("data-saved-percent", "50.0")
    expect(page.locator("#logs .log-line").first).to_be_visible()
    expect(page.locator("#cancel-job")).to_be_hidden()  # an ended job has nothing to cancel
    # Where the start went, launch to first step, from its start_phases event.
    start = page.locator("#job-start")
    for phase in ("launch", "interpreter", "imports", "rendezvous", "model build", "first step"):
        expect(start).to_contain_text(f"{phase} ")
    expect(start).to_contain_text("(attempt 1)")

    # The loss on a log axis unless unticked; each chart says which steps it shows.
    expect(page.locator("#chart-loss svg")).to_have_attribute("data-scale", "log")
    expect(page.locator("#chart-loss-window")).to_have_text("steps 10\u2013150: the whole run")
    step_time_window = page.locator("#chart-step-time-window")
    expect(step_time_window).to_have_text("steps 10\u2013150: every logged step")
    page.uncheck("#loss-log")
    expect(page.locator("#chart-loss svg")).to_have_attribute("data-scale", "linear")
    page.check("#loss-log")
    # The spec as resolved, and the headline: the final validation accuracy.
    expect(page.locator("#spec-stop")).to_have_text("150 steps")
    expect(page.locator("#spec-checkpoint")).to_have_text("at the end only, keeping the last 2")
    expect(page.locator("#spec-shape")).to_have_text("1 \u00d7 2 ranks (any)")
    hidden = page.locator("#spec-hyperparameters tr[data-name='hidden'] .value")
    expect(hidden).to_have_text("256")
    expect(page.locator("#job-headline-name")).to_have_text("final val_accuracy")
    headline = page.locator("#job-headline")
    expect(headline).to_contain_text("higher is better")
    accuracy = fleet.job(job["id"])["latest_metrics"]["val_accuracy"]
    assert float(headline.get_attribute("data-value") or "nan") == accuracy

    assert save_screenshot(page, "job-page.png", capsys).stat().st_size > 10_000

    # Opened afterwards, the page draws the same curves from the stored history, and the
    # stream then only adds what is new (here, nothing).
    live_points = loss.get_attribute("data-points")
    requests: list[Request] = []
    page.on("request", lambda request: requests.append(request))  # noqa: PLW0108 (a bound builtin cannot be a Playwright handler)
    page.reload()
    expect(page.locator("#job-state")).to_have_attribute("data-state", "SUCCEEDED")
    expect(page.locator("#stream-status")).to_have_text("ended")
    expect(loss).to_have_attribute("data-points", live_points or "")
    # Where its slot-seconds went, from the job's GET (one attempt: nothing recomputed).
    expect(page.locator("#job-goodput")).to_contain_text("slot-seconds in training")
    expect(page.locator("#job-goodput")).to_contain_text("startup")
    expect(page.locator("#job-goodput")).not_to_contain_text("recomputed")
    expect(page.locator("#chart-validation polyline[data-series='val_accuracy']")).to_have_count(1)
    history = next(r for r in requests if f"/v1/jobs/{job['id']}/metrics?" in r.url)
    last_metric_id = history.response().json()["last_metric_id"]  # type: ignore[union-attr]
    stream = next(r for r in requests if r.url.endswith(f"/v1/jobs/{job['id']}/events"))
    assert stream.headers["last-event-id"].endswith(f":{last_metric_id}")
    assert last_metric_id > 0

    # The list's filters: the finished job is among the finished, not among the running.
    page.click("a[data-nav='jobs']")
    page.select_option("#filter-state", "finished")
    expect(page).to_have_url(re.compile(r"#/jobs\?state=finished$"))
    expect(page.locator(f"#jobs-table tr[data-job='{job['id']}']")).to_be_visible()
    save_screenshot(page, "jobs-page.png", capsys)
    page.select_option("#filter-state", "RUNNING")
    expect(page.locator(f"#jobs-table tr[data-job='{job['id']}']")).to_have_count(0)
    page.select_option("#filter-state", "")
    page.fill("#filter-project", "no-such-project")
    page.press("#filter-project", "Enter")
    expect(page.locator("#jobs-table td.empty")).to_have_text("No jobs match.")


def test_cancel_a_running_job_from_its_page(fleet: Fleet, page: Page) -> None:
    job = fleet.submit(job_spec(name="ui-cancel", stop={"max_steps": LONG}))
    try:
        log_in(page, fleet, f"#/jobs/{job['id']}")
        expect(page.locator("#job-state")).to_have_attribute(
            "data-state", "RUNNING", timeout=90_000
        )
        expect(page.locator("#eta")).to_contain_text("ETA")

        page.select_option("#priority", "high")
        expect(page.locator("#action-notice")).to_have_text("priority set to high")
        assert fleet.job(job["id"])["priority"] == "high"

        mark(page, "#timeline li[data-to='RUNNING']")
        page.click("#cancel-job")
        page.click("#confirm-cancel")
        expect(page.locator("#job-state")).to_have_attribute(
            "data-state", "CANCELLED", timeout=60_000
        )
        expect(page.locator("#timeline li[data-to='CANCELLING']")).to_have_count(1)
        expect(page.locator("#timeline li[data-to='CANCELLED']")).to_have_count(1)
        expect(page.locator("#cancel-job")).to_be_hidden()
        # New events were appended: the items already shown are the same elements.
        assert still_marked(page, "#timeline li[data-to='RUNNING']")
        order = page.locator("#timeline li").evaluate_all("items => items.map(i => i.dataset.id)")
        assert order == sorted(order, key=int)  # appended in event order
        transitions = page.locator("#timeline li.transition")
        states = transitions.evaluate_all("items => items.map(i => i.dataset.to)")
        assert states[-3:] == ["RUNNING", "CANCELLING", "CANCELLED"]
    finally:
        if fleet.job(job["id"])["state"] != "CANCELLED":
            cancel_quietly(fleet, job["id"])


def test_fleet_page_shows_the_node_and_the_queue(
    fleet: Fleet, page: Page, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = fleet.submit(job_spec(name="ui-blocker", stop={"max_steps": LONG}))
    waiting: dict[str, object] = {}
    try:
        fleet.wait_for_state(blocker["id"], {"RUNNING"}, timeout=90)
        waiting = fleet.submit(job_spec(name="ui-waiting"))
        log_in(page, fleet, "#/fleet")
        node = page.locator("#nodes .node[data-node='node-a']")
        expect(node).to_be_visible()
        expect(node.locator(".node-alive")).to_have_text("alive")
        expect(node.locator(".slot.used")).to_have_count(2)
        expect(node.locator(".slot-count")).to_have_text("2 used / 0 free")
        queued = page.locator(f"#queue tr[data-job='{waiting['id']}']")
        expect(queued.locator(".position")).to_have_text("1")
        expect(queued.locator(".pending-reason")).not_to_have_text("—")
        save_screenshot(page, "fleet-page.png", capsys)
        fleet.http.post("/v1/nodes/node-a/cordon").raise_for_status()
        expect(node.locator(".node-cordoned")).to_have_text("cordoned")
        expect(node.locator(".state-reason")).to_have_text("cordoned by an operator")
        fleet.http.post("/v1/nodes/node-a/uncordon").raise_for_status()
        expect(node.locator(".state-reason")).to_have_count(0)
    finally:
        fleet.http.post("/v1/nodes/node-a/uncordon")
        for job in (waiting, blocker):
            if job:
                cancel_quietly(fleet, str(job["id"]))


FETCH_LOG = """
window.fetchedUrls = [];
const untracedFetch = window.fetch;
window.fetch = (input, init) => {
  const url = new URL(input instanceof Request ? input.url : input, location.href);
  window.fetchedUrls.push(url.pathname);
  return untracedFetch(input, init);
};
"""


def test_job_page_takes_progress_from_the_stream_alone(fleet: Fleet, clock_page: Page) -> None:
    page = clock_page
    job = fleet.submit(job_spec(name="ui-progress", stop={"max_steps": LONG}))
    try:
        fleet.wait_for_state(job["id"], {"RUNNING"}, timeout=90)
        page.add_init_script(FETCH_LOG)
        log_in(page, fleet, f"#/jobs/{job['id']}")
        expect(page.locator("#job-state")).to_have_attribute("data-state", "RUNNING")
        bar = page.locator("#job-progress .progress")
        expect(bar).not_to_have_attribute("aria-valuenow", "0")
        for selector in (
            "#job-summary dd",
            "#job-created",
            "#job-progress .progress",
            "#timeline li",
        ):
            mark(page, selector)
        created = page.locator("#job-created").inner_text()
        running_for = page.locator("#job-run-for").inner_text()

        # A minute of the page's timers, all at once: nothing may poll the job.
        page.clock.run_for(60_000)
        # The ages tick on the page's clock, in place: a minute older, both of them (give or
        # take the rounding of whole seconds on either side).
        assert ages(page.locator("#job-created").inner_text()) >= ages(created) + 58
        assert ages(page.locator("#job-run-for").inner_text()) >= ages(running_for) + 58
        assert still_marked(page, "#job-created")
        step = bar.get_attribute("aria-valuenow")
        expect(bar).not_to_have_attribute("aria-valuenow", step or "")  # frames keep coming
        expect(page.locator("#eta")).to_have_text(re.compile(r"^ETA \d"))  # the server's
        fetched = page.evaluate("window.fetchedUrls")
        assert fetched.count(f"/v1/jobs/{job['id']}") == 1, fetched  # the first load only
        # Progress frames moved the bar; the summary and the timeline were left alone.
        for selector in ("#job-summary dd", "#job-progress .progress", "#timeline li"):
            assert still_marked(page, selector), selector
    finally:
        cancel_quietly(fleet, job["id"])


def ages(text: str) -> int:
    """Seconds in the console's durations: "42s ago", "1m 05s", "2h 01m"."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([dhms])", text))


def parked(fleet: Fleet, project: str) -> None:
    """A project whose jobs stay queued: a quota of no slots."""
    response = fleet.http.put(f"/v1/projects/{project}", json={"max_slots": 0})
    assert response.status_code == 200, response.text


def cancel_all(fleet: Fleet, job_ids: list[str]) -> None:
    for job_id in job_ids:
        fleet.http.post(f"/v1/jobs/{job_id}/cancel")


def test_jobs_list_refreshes_in_place_and_keeps_older_rows(fleet: Fleet, page: Page) -> None:
    parked(fleet, "ui-list")
    ids = [fleet.submit(job_spec(project="ui-list"))["id"] for _ in range(PAGE + 2)]
    try:
        log_in(page, fleet, "#/jobs?project=ui-list")
        rows = page.locator("#jobs-table tbody tr[data-job]")
        expect(rows).to_have_count(PAGE)
        page.click("#jobs-more")
        expect(rows).to_have_count(PAGE + 2)
        oldest = f"#jobs-table tr[data-job='{ids[0]}']"
        newest = f"#jobs-table tr[data-job='{ids[-1]}']"
        mark(page, oldest)
        mark(page, newest)

        assert fleet.http.post(f"/v1/jobs/{ids[0]}/cancel").status_code == 202
        ids.append(fleet.submit(job_spec(project="ui-list"))["id"])
        # The next refreshes (every few seconds) bring both changes.
        expect(rows.first).to_have_attribute("data-job", ids[-1], timeout=20_000)  # on top
        expect(page.locator(oldest)).to_have_attribute("data-state", "CANCELLED", timeout=20_000)
        expect(rows).to_have_count(PAGE + 3)  # the older rows stayed
        assert still_marked(page, newest)  # unchanged: the same row
        assert still_marked(page, oldest)  # changed: the same row, its cells redrawn
        expect(page.locator(f"{oldest} .badge")).to_have_text("CANCELLED")
        shown = rows.evaluate_all("rows => rows.map(r => r.dataset.job)")
        assert shown == list(reversed(ids))
    finally:
        cancel_all(fleet, ids)


def whole_queue(fleet: Fleet) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = fleet.http.get("/v1/queue", params=params).json()
        ids += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


def test_fleet_page_shows_the_queue_in_the_servers_order_page_by_page(
    fleet: Fleet, page: Page
) -> None:
    parked(fleet, "ui-queue")
    ids = [fleet.submit(job_spec(project="ui-queue"))["id"] for _ in range(PAGE)]
    urgent = [fleet.submit(job_spec(project="ui-queue", priority="high"))["id"] for _ in range(2)]
    try:
        log_in(page, fleet, "#/fleet")
        rows = page.locator("#queue tbody tr[data-job]")
        expect(rows).to_have_count(PAGE)
        expect(page.locator("#fleet-totals")).to_contain_text(f"{PAGE + 2} queued")
        # Submitted last, first in line: their priority class comes before FIFO.
        expect(rows.nth(0)).to_have_attribute("data-job", urgent[0])
        expect(rows.nth(1)).to_have_attribute("data-job", urgent[1])
        expect(rows.first.locator(".pending-reason")).to_contain_text("quota", timeout=20_000)
        mark(page, f"#queue tr[data-job='{urgent[0]}']")

        page.click("#queue-more")
        expect(rows).to_have_count(PAGE + 2)
        expect(page.locator("#queue-more")).to_be_hidden()
        shown = rows.evaluate_all("rows => rows.map(r => r.dataset.job)")
        assert shown == whole_queue(fleet)
        positions = rows.locator(".position").all_inner_texts()
        assert positions == [str(n) for n in range(1, PAGE + 3)]
        assert still_marked(page, f"#queue tr[data-job='{urgent[0]}']")  # updated in place
    finally:
        cancel_all(fleet, ids + urgent)


def test_job_page_lists_artifacts_downloads_one_and_shows_the_manifest(
    fleet: Fleet, page: Page, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = job_spec(
        name="ui-artifacts", stop={"max_steps": 30}, hyperparameters={"save_split": True}
    )
    job_id = fleet.submit(spec)["id"]
    fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=150)
    listed = {a["name"]: a for a in fleet.http.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]}
    manifest = fleet.http.get(f"/v1/jobs/{job_id}/artifacts/manifest.json").json()
    requests: list[Request] = []
    page.on("request", lambda request: requests.append(request))  # noqa: PLW0108 (as above)

    log_in(page, fleet, f"#/jobs/{job_id}")
    expect(page.locator("#artifacts-table tbody tr[data-artifact]")).to_have_count(len(listed))
    model = page.locator("#artifacts-table tr[data-artifact='model.safetensors']")
    weights = listed["model.safetensors"]
    expect(model.locator(".kind")).to_have_text("model")
    expect(model.locator(".size")).to_have_attribute("title", f"{weights['size']} bytes")
    expect(model.locator(".sha256")).to_have_text(weights["sha256"][:12])
    expect(model.locator(".step")).to_have_text("30")
    for name, kind in (
        ("outputs/val_split.json", "output"),
        ("checkpoint-000000030", "checkpoint"),
    ):
        expect(page.locator(f"#artifacts-table tr[data-artifact='{name}'] .kind")).to_have_text(
            kind
        )

    # The manifest: the precision lineage and the final metrics.
    expect(page.locator("#manifest-precision")).to_have_text("bf16")
    expect(page.locator("#manifest-allreduce")).to_have_text("bf16")
    expect(page.locator("#manifest-fallbacks li.fallback")).to_have_count(0)
    accuracy = page.locator("#manifest-metrics tr[data-metric='val_accuracy'] .value")
    expect(accuracy).to_be_visible()
    shown = float(accuracy.get_attribute("data-value") or "nan")
    assert (
        shown
        == manifest["metrics"]["val_accuracy"]
        == fleet.job(job_id)["latest_metrics"]["val_accuracy"]
    )
    save_screenshot(page, "job-artifacts.png", capsys)

    with page.expect_download() as started:
        model.locator("button.download").click()
    download = started.value
    assert download.suggested_filename == "model.safetensors"
    saved = tmp_path / "model.safetensors"
    download.save_as(saved)
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == weights["sha256"]
    expect(model).to_have_attribute("data-downloaded", "verified")  # checked in the page too
    # The key went in a header, never into a URL (history, logs, Referer).
    fetched = next(r for r in requests if r.url.endswith(f"/{job_id}/artifacts/model.safetensors"))
    assert fetched.all_headers()["authorization"] == f"Bearer {fleet.admin_key}"
    assert not [r.url for r in requests if fleet.admin_key in r.url]


def test_job_page_profiles_a_running_job_and_downloads_a_trace(
    fleet: Fleet, page: Page, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = fleet.submit(job_spec(name="ui-profile", stop={"max_steps": LONG}))
    try:
        log_in(page, fleet, f"#/jobs/{job['id']}")
        expect(page.locator("#job-state")).to_have_attribute(
            "data-state", "RUNNING", timeout=90_000
        )
        button = page.locator("#profile-job")
        expect(button).to_have_text("Profile 5 steps")
        expect(button).to_be_enabled()
        button.click()
        expect(page.locator("#profile-state")).to_have_attribute(
            "data-state", "done", timeout=90_000
        )
        expect(page.locator("#profile-figures")).to_contain_text("of the step")
        expect(page.locator("#profile-top tbody tr")).to_have_count(5)
        expect(page.locator("#profile-files li")).to_have_count(3)  # 2 traces, the summary
        page.locator("#profile").scroll_into_view_if_needed()
        save_screenshot(page, "job-profile.png", capsys)
        trace = page.locator("#profile-files li[data-artifact$='/rank-0.trace.json']")
        with page.expect_download() as started:
            trace.locator("button.download").click()
        saved = tmp_path / "rank-0.trace.json"
        started.value.save_as(saved)
        operators = {e.get("name") for e in json.loads(saved.read_text())["traceEvents"]}
        assert {"aten::addmm", "aten::mm"} & operators
        expect(trace).to_have_attribute("data-downloaded", "verified")
        expect(button).to_be_enabled()  # that one is over: another may be asked for
        profiles = page.locator("#artifacts-table tr[data-kind='profile']")
        expect(profiles).to_have_count(3)  # and the artifacts panel lists its files
    finally:
        cancel_quietly(fleet, job["id"])


def test_job_page_shows_the_code_bundle_and_the_inputs(fleet: Fleet, page: Page) -> None:
    """A bundled job's page: entrypoint, bundle, sha256, requirements, the file list as the
    nodes unpack it, and each input with the dataset version it resolved to (the spec is
    shown whatever the job's state: this recipe is no RecipeDefinition, so it fails)."""
    body = zip_of({"pkg/__init__.py": b"", "pkg/recipe.py": b"recipe = None\n"})
    bundle = fleet.http.post("/v1/bundles", content=body).json()
    dataset = fleet.http.post(
        "/v1/datasets", params={"name": "pairs", "filename": "pairs.csv"}, content=b"x,y\n1,2\n"
    ).json()
    spec = job_spec(
        name="ui-code",
        code={"bundle": bundle["id"], "entrypoint": "pkg.recipe:recipe"},
        inputs={"train": "pairs"},
        resources={"procs_per_node": 1},
    )
    del spec["recipe"]
    submitted = fleet.http.post("/v1/jobs", json=spec)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    try:
        log_in(page, fleet, f"#/jobs/{job_id}")
        expect(page.locator("#code-entrypoint")).to_have_text("pkg.recipe:recipe")
        expect(page.locator("#code-bundle")).to_have_text(bundle["id"])
        expect(page.locator("#code-sha256")).to_have_text(bundle["sha256"])
        expect(page.locator("#code-requirements")).to_have_text("none")
        expect(page.locator("#code-files tr[data-path]")).to_have_count(2)
        expect(page.locator("#code-files tr[data-path='pkg/recipe.py']")).to_be_visible()
        train = page.locator("#code-inputs tr[data-input='train']")
        expect(train).to_contain_text("pairs@1")
        expect(train).to_contain_text(dataset["id"])
    finally:
        cancel_quietly(fleet, job_id)


def test_a_script_jobs_page_shows_its_command_and_no_total(fleet: Fleet, page: Page) -> None:
    """A script job (code.command) names its command where a recipe job names its recipe,
    stops when the script exits, and has no total steps until it says one."""
    body = zip_of({"train.py": b"import time\ntime.sleep(600)\n"})
    bundle = fleet.http.post("/v1/bundles", content=body).json()
    spec = job_spec(
        name="ui-script",
        code={"bundle": bundle["id"], "command": ["python", "train.py", "--note", "two words"]},
        resources={"procs_per_node": 1},
    )
    del spec["recipe"], spec["stop"]
    submitted = fleet.http.post("/v1/jobs", json=spec)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    command = "python train.py --note 'two words'"
    try:
        log_in(page, fleet, f"#/jobs/{job_id}")
        expect(page.locator("#code-command")).to_have_text(command)
        expect(page.locator("#code-entrypoint")).to_have_count(0)
        expect(page.locator("#spec-trains")).to_have_text(f"{command} from {bundle['id']}")
        expect(page.locator("#spec-stop")).to_have_text("when the script exits")
        summary = page.locator("#job-summary")
        expect(summary).to_contain_text(command)
        expect(summary).not_to_contain_text("bundle:")
        expect(page.locator("#progress-text")).to_have_text("step 0")
    finally:
        cancel_quietly(fleet, job_id)


@pytest.mark.slow  # a fine-tuning job: its rank imports transformers and peft
def test_job_page_shows_a_fine_tunes_samples_at_each_evaluation(
    fleet: Fleet, page: Page, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tiny_model_folder(tmp_path / "base")
    train, validation = echo_task(tmp_path / "data", train=16, validation=4)
    with Client(fleet.base_url, fleet.admin_key) as client:
        inputs = {
            name: f"{client.upload_dataset(f'ui-{name}', path).name}@1"
            for name, path in (("model", base), ("train", train), ("validation", validation))
        }
    spec = {
        "name": "ui-samples",
        "recipe": "finetune-lm",
        "inputs": inputs,
        "hyperparameters": {
            "batch_size": 4,
            "max_seq_length": 16,
            "sample_prompts": ["echo abc:", "echo dd:"],
            "sample_max_new_tokens": 3,
        },
        "resources": {"accelerator": "cpu", "procs_per_node": 1},
        "stop": {"max_steps": 2},
        "eval_every_steps": 1,
    }
    job_id = fleet.submit(spec)["id"]
    done = fleet.wait_for_state(job_id, {"SUCCEEDED", "FAILED"}, timeout=300)
    assert done["state"] == "SUCCEEDED", done.get("failure_reason")

    log_in(page, fleet, f"#/jobs/{job_id}")
    text = page.locator("#samples-text")
    expect(page.locator("#samples")).to_be_visible()
    expect(page.locator("#samples-step option")).to_have_count(2)  # steps 1 and 2
    expect(text).to_have_attribute("data-step", "2")  # the latest first
    expect(text).to_contain_text("### prompt\necho abc:\n### completion\n")
    expect(text).to_contain_text("### prompt\necho dd:\n")
    page.select_option("#samples-step", "1")
    expect(text).to_have_attribute("data-step", "1")
    shown = {
        s["step"]: s["text"] for s in fleet.http.get(f"/v1/jobs/{job_id}/samples").json()["items"]
    }
    assert text.text_content() == shown[1]
    save_screenshot(page, "job-samples.png", capsys)
