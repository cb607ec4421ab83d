"""The blocking client is written from the async one (tools/unasync_sdk.py): the committed
client.py is what the source gives, so the two clients have the same methods, signatures,
defaults and docstrings."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from ampfleet.sdk.async_client import AsyncClient
from ampfleet.sdk.client import Client

ROOT = Path(__file__).resolve().parent.parent.parent


def test_client_py_is_what_async_client_py_gives() -> None:
    done = subprocess.run(
        [sys.executable, "tools/unasync_sdk.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_both_clients_have_the_same_methods_and_parameters() -> None:
    blocking, asynchronous = _public(Client), _public(AsyncClient)
    assert set(asynchronous) - {"aclose"} == set(blocking) - {"close"}
    for name, signature in blocking.items():
        if name != "close":
            assert list(signature.parameters) == list(asynchronous[name].parameters), name
