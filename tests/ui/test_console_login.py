"""`ampfleet ui`'s link in headless Chromium: it lands logged in, as a session of the key and
never the key itself, with the token gone from the address bar; the same link a second
time, or a made-up one, shows why it was refused on the login page."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.support.fleet import Fleet, fleet_cli
from tests.ui.console import failing_on_script_errors

pytestmark = [pytest.mark.ui, pytest.mark.e2e]


def test_the_printed_link_opens_the_console_logged_in_once(
    fleet: Fleet, page: Page, browser: BrowserContext, tmp_path: Path
) -> None:
    printed = fleet_cli(fleet, "ui", "--no-browser", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    link = printed.stdout.strip()
    assert link.startswith(f"{fleet.base_url}/ui/#login=ampl_")

    page.goto(link)
    expect(page.locator("#jobs-table")).to_be_visible()
    expect(page.locator("#nav")).to_be_visible()
    expect(page.locator("#whoami")).to_have_text("admin key of default (console session)")
    assert page.evaluate("location.hash") == "#/jobs"  # the token left the address bar
    assert "login=" not in page.evaluate("location.href")
    session = page.evaluate("sessionStorage.getItem('ampfleet.apiKey')")
    assert session.startswith("ampc_")
    assert fleet.admin_key not in session
    page.click("a[data-nav='fleet']")  # the session serves every page
    expect(page.locator("#nodes .node[data-node='node-a']")).to_be_visible()
    page.reload()  # kept for the tab, as a typed key is
    expect(page.locator("#nodes")).to_be_visible()

    with failing_on_script_errors(browser.new_page()) as second:
        second.goto(link)
        expect(second.locator("#error .error-code")).to_have_text("login_token_used")
        expect(second.locator("#error")).to_contain_text("ampfleet ui")
        expect(second.locator("#login-form")).to_be_visible()
        second.goto(f"{fleet.base_url}/ui/#login=ampl_made_up")
        second.reload()  # a hash change alone loads nothing
        expect(second.locator("#error .error-code")).to_have_text("login_token_invalid")
        expect(second.locator("#nav")).to_be_hidden()

    page.click("#logout")
    expect(page.locator("#login-form")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0
