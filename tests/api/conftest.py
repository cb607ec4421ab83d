"""Fixtures that several API test modules share: `writer`, a client with a write key of
project `alpha` while the recipes this checkout registers are installed (an older editable
install may list fewer); `receiver`, a local webhook endpoint; `private_allowed`, webhooks let
through to private addresses, with quick retries. A module's own fixture of the same name
(several have a `writer` of their own) overrides these."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.core import recipes
from tests.conftest import KeyFactory
from tests.support.checkout_recipes import use_checkout_recipes
from tests.support.clients import keyed
from tests.support.env import environment
from tests.support.webhooks import Receiver


@pytest.fixture
def writer(tmp_path: Path, app: FastAPI, make_key: KeyFactory) -> Iterator[TestClient]:
    site = tmp_path / "site"
    use_checkout_recipes(site)
    try:
        with keyed(app, make_key("alpha", "write")) as client:
            yield client
    finally:
        sys.path.remove(str(site))
        recipes.installed_recipes.cache_clear()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def private_allowed(backend: str) -> Iterator[None]:
    with environment(
        {"AMPFLEET_WEBHOOK_ALLOW_PRIVATE": "true", "AMPFLEET_WEBHOOK_RETRY_BASE_S": "0.01"}
    ):
        yield
