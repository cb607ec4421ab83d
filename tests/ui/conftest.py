"""The console's browser tests share one fleet (api, scheduler and one worker node, each a
real process, on PostgreSQL and Redis): a fleet starts in tens of seconds. Each module has
its own Chromium, each test its own tabs (an empty sessionStorage)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, sync_playwright

from tests.support.fleet import Fleet, running_fleet
from tests.ui.console import CHROMIUM, CHROMIUM_FLAGS, VIEWPORT, failing_on_script_errors


@pytest.fixture(scope="package")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with running_fleet(tmp_path_factory.mktemp("ui-fleet")) as started:
        yield started


# Per module: a module that drives Chromium its own way starts Playwright itself, and
# Playwright's sync API runs one driver at a time.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.fail(f"headless Chromium is missing ({CHROMIUM}): run `make ui-deps`")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(
    playwright: Playwright, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrowserContext]:
    context = playwright.chromium.launch_persistent_context(
        tmp_path_factory.mktemp("chromium-profile"),  # a fresh --user-data-dir
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport=VIEWPORT,
    )
    context.set_default_timeout(20_000)
    yield context
    context.close()


@pytest.fixture
def page(fleet: Fleet, browser: BrowserContext) -> Iterator[Page]:
    """A new tab (so an empty sessionStorage); fails the test on any uncaught script error."""
    with failing_on_script_errors(browser.new_page()) as tab:
        yield tab


@pytest.fixture
def clock_page(fleet: Fleet, playwright: Playwright) -> Iterator[Page]:
    """A tab whose timers the test drives (`page.clock`), in a browser of its own: a clock
    is installed for a whole browser context, and would drive every later test's too."""
    chromium = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
    )
    try:
        context = chromium.new_context(viewport=VIEWPORT)
        context.set_default_timeout(20_000)
        context.clock.install()
        with failing_on_script_errors(context.new_page()) as tab:
            yield tab
        context.close()
    finally:
        chromium.close()
