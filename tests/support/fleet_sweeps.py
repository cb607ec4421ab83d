"""Sweeps on a fleet of real processes: the trials' base spec (digits, with rungs to prune
at) and a client that follows a sweep's event stream to its end."""

from __future__ import annotations

import time
from typing import Any

from tests.support.factories import job_spec
from tests.support.fleet import Fleet

STEPS, EVAL_EVERY = 240, 20
"""Rungs at 20, 40, 80 and 160 steps: one pruned at the first has most of its steps left."""
DEFAULT_LR = 3e-3  # the digits recipe's default learning rate


def base(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "resources": {"procs_per_node": 1},
        "precision": "fp32",
        "allreduce_dtype": "fp32",
        "stop": {"max_steps": STEPS},
        "eval_every_steps": EVAL_EVERY,
        "log_every_steps": 5,
        "hyperparameters": {"hidden": 512, "batch_size": 256},
    }
    return job_spec(**{**fields, **overrides})


def wait_for_sweep(fleet: Fleet, sweep_id: str, timeout: float = 600) -> dict[str, Any]:
    """Follows the sweep's event stream to its `end` (the sweep and its trials ended): a
    client that waits on the server's stream rather than polling the whole sweep."""
    deadline = time.monotonic() + timeout
    kinds: list[str] = []
    while "end" not in kinds and time.monotonic() < deadline:
        with fleet.http.stream(
            "GET", f"/v1/sweeps/{sweep_id}/events", headers={"Accept": "text/event-stream"}
        ) as stream:
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kinds.append(line.removeprefix("event: "))
                if kinds[-1:] == ["end"] or time.monotonic() > deadline:
                    break
    assert "end" in kinds, f"sweep {sweep_id} still running after {timeout:g} s\n{fleet.logs()}"
    assert "progress" in kinds
    return dict(fleet.http.get(f"/v1/sweeps/{sweep_id}").json())
