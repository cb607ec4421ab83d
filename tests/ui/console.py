"""What the console's browser tests share: the Debian chromium they drive, logging in, the
screenshots they leave, and marks that tell an element kept from one redrawn."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from tests.support.fleet import Fleet

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
VIEWPORT: ViewportSize = {"width": 1400, "height": 1000}


@contextmanager
def failing_on_script_errors(tab: Page) -> Iterator[Page]:
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    tab.close()  # closes its streams before the fleet stops
    assert not errors, f"uncaught errors in the console: {errors}"


def log_in(page: Page, fleet: Fleet, route: str = "#/jobs") -> None:
    page.goto(f"{fleet.base_url}/ui/{route}")
    page.fill("#api-key", fleet.admin_key)
    page.click("#login-submit")
    expect(page.locator("#nav")).to_be_visible()


def save_screenshot(page: Page, name: str, capsys: pytest.CaptureFixture[str]) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    with capsys.disabled():
        print(f"\nscreenshot: {path}")
    return path


def mark(page: Page, selector: str) -> None:
    """Tags the element itself (not an attribute a redraw would copy)."""
    page.locator(selector).first.evaluate("el => { el.keptAcrossRedraws = true; }")


def still_marked(page: Page, selector: str) -> bool:
    return bool(page.locator(selector).first.evaluate("el => el.keptAcrossRedraws === true"))
