"""The SDK's clients give up an idle connection before the API server would close it."""

from __future__ import annotations

import inspect

import pytest
import uvicorn

from ampfleet.sdk import AsyncClient, Client
from ampfleet.sdk.base import KEEPALIVE_EXPIRY_S


def test_an_idle_connection_is_dropped_before_the_servers_keep_alive() -> None:
    """`ampfleet api` runs uvicorn with its default keep-alive; a client that kept a
    connection as long could send on it as the server closes it."""
    server_keep_alive = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"]
    assert server_keep_alive.default / 2 >= KEEPALIVE_EXPIRY_S


@pytest.mark.parametrize("kind", [Client, AsyncClient])
def test_both_clients_use_it(kind: type[Client] | type[AsyncClient]) -> None:
    client = kind("http://127.0.0.1:9", "amp_x_y")
    pool = client._connect()._transport._pool  # type: ignore[union-attr]
    assert pool._keepalive_expiry == KEEPALIVE_EXPIRY_S
