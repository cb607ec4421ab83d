"""`ampfleet ui` against a live API: it prints a one-time link to the console (never the
key) that logs in once, and hands the link to the user's browser ($BROWSER) unless told
--no-browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from ampfleet.cli import app as cli
from tests.support.live_api import serving

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

LINK = re.compile(r"^(?P<base>http://127\.0\.0\.1:\d+)/ui/#login=(?P<token>ampl_[\w-]+)$")


def test_ui_prints_a_one_time_link_and_opens_it_in_the_browser(
    app: FastAPI, make_key: Callable[..., str], tmp_path: Path
) -> None:
    key = make_key(project="alpha", role="read")
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n')
    browser.chmod(0o755)
    with serving(app) as base_url:
        env = {"AMPFLEET_URL": base_url, "AMPFLEET_API_KEY": key, "BROWSER": f"{browser} %s"}
        printed = CliRunner(env=env).invoke(cli, ["ui", "--no-browser"])
        assert printed.exit_code == 0, printed.output
        link = printed.stdout.strip()
        match = LINK.fullmatch(link)
        assert match, printed.stdout
        assert match["base"] == base_url
        assert key not in printed.output
        assert "once, within 60 s" in printed.stderr
        assert not opened.exists()  # --no-browser: printed only

        session = httpx.post(f"{base_url}/v1/console-sessions", json={"token": match["token"]})
        assert session.status_code == 201, session.text
        assert (session.json()["project"], session.json()["role"]) == ("alpha", "read")
        again = httpx.post(f"{base_url}/v1/console-sessions", json={"token": match["token"]})
        assert again.json()["error"]["code"] == "login_token_used"

        # A real process, so the browser is the one $BROWSER names (webbrowser reads it once).
        run = subprocess.run(
            [sys.executable, "-m", "ampfleet.cli", "ui"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert opened.read_text() == run.stdout.strip()
        assert LINK.fullmatch(opened.read_text())
        assert opened.read_text() != link  # a new token each time

        refused = CliRunner(env={**env, "AMPFLEET_API_KEY": "amp_nope_nope"}).invoke(cli, ["ui"])
        assert refused.exit_code == 1
        assert "not valid" in refused.output
