"""The SDK runs in users' programs: importing it loads none of the server's dependencies."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_ONLY = ("sqlalchemy", "fastapi", "celery", "torch", "ampfleet.api", "ampfleet.core.db")


def test_importing_the_sdk_loads_no_server_dependency() -> None:
    probe = (
        "import json, sys; import ampfleet.sdk; "
        f"print(json.dumps([m for m in {SERVER_ONLY!r} if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == []
