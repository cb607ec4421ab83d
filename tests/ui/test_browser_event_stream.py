"""A browser app other than the console streams a job's events with the native EventSource,
which sends no Authorization header: it opens the stream with a short-lived token that
is good for that job's event stream only, and closes on `end`. Headless Chromium against
uvicorn on loopback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi import FastAPI
from playwright.sync_api import Page, sync_playwright

from tests.support.factories import job_spec
from tests.support.live_api import serving
from tests.ui.console import CHROMIUM, CHROMIUM_FLAGS

pytestmark = [pytest.mark.ui]

# What a browser app writes: open with the token, collect event types, close on `end`.
OPEN_AND_CLOSE_ON_END = """([url, waitMs]) => new Promise((resolve) => {
  const kinds = [];
  const source = new EventSource(url);
  const finish = (last) => { source.close(); resolve([...kinds, last]); };
  for (const kind of ["state", "event", "progress", "metrics"]) {
    source.addEventListener(kind, () => kinds.push(kind));
  }
  source.addEventListener("end", () => finish("end"));
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) finish("closed"); };
  setTimeout(() => finish("timeout"), waitMs);
})"""
WAIT_MS = 20_000
HTTP_TIMEOUT_S = 30  # not httpx's 5 s: on a loaded machine a submit once took longer


@pytest.fixture
def chromium_page() -> Iterator[Page]:
    if not CHROMIUM.exists():
        pytest.fail(f"headless Chromium is missing ({CHROMIUM}): run `make ui-deps`")
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser.new_page()
        finally:
            browser.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_browser_streams_events_with_a_stream_token_and_closes_on_end(
    app: FastAPI,
    make_key: Callable[..., str],
    chromium_page: Page,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = make_key()
    auth = {"Authorization": f"Bearer {key}"}
    with (
        serving(app) as base_url,
        httpx.Client(base_url=base_url, headers=auth, timeout=HTTP_TIMEOUT_S) as api,
    ):
        job = api.post("/v1/jobs", json=job_spec()).json()["id"]
        other = api.post("/v1/jobs", json=job_spec()).json()["id"]
        assert api.post(f"/v1/jobs/{job}/cancel").status_code == 202  # not placed: ends now
        issued = api.post(f"/v1/jobs/{job}/events/token")
        assert issued.status_code == 200, issued.text
        token = issued.json()["token"]

        with httpx.Client(base_url=base_url, timeout=HTTP_TIMEOUT_S) as anonymous:
            stream = {"Accept": "text/event-stream"}
            elsewhere = [
                f"/v1/jobs/{other}/events?token={token}",  # another job's stream
                f"/v1/jobs/{job}/logs?token={token}",  # another stream of this job
                f"/v1/jobs/{job}?token={token}",  # not a stream at all
                f"/v1/jobs/{job}/events?token={token[:-2]}xx",  # altered
            ]
            for path in elsewhere:
                refused = anonymous.get(path, headers=stream)
                assert refused.status_code == 401, (path, refused.text)
                assert refused.json()["error"]["code"] == "unauthorized"
            with anonymous.stream(
                "GET", f"/v1/jobs/{job}/events?token={token}", headers=stream
            ) as r:
                first = next(r.iter_lines())
            assert first == "retry: 3000"

        tab = chromium_page
        tab.goto(f"{base_url}/healthz")
        with caplog.at_level(logging.INFO, logger="ampfleet.access"):
            kinds = tab.evaluate(
                OPEN_AND_CLOSE_ON_END, [f"/v1/jobs/{job}/events?token={token}", WAIT_MS]
            )
    assert kinds[-1] == "end", kinds
    assert "state" in kinds
    assert any(f"/v1/jobs/{job}/events" in r.getMessage() for r in caplog.records)
    assert all(token not in r.getMessage() for r in caplog.records)
