"""The start's phases: what rank 0 may write about them, and what the agent makes of it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from ampfleet.workers.records import Rejected, parse
from ampfleet.workers.start_phases import PHASES, StartPath, describe, durations

ENDS = {
    "launch": 101.5,
    "interpreter": 101.75,
    "imports": 103.0,
    "rendezvous": 103.25,
    "model_build": 104.0,
    "first_step": 104.5,
}


def line(**fields: object) -> bytes:
    return json.dumps({"kind": "start_phases", "time": 1.0, **fields}).encode()


def test_each_phase_is_the_time_since_the_one_before_and_the_launch_the_agents() -> None:
    assert durations(ENDS, launched_at=100.0) == {
        "launch": 1.5,
        "interpreter": 0.25,
        "imports": 1.25,
        "rendezvous": 0.25,
        "model_build": 0.75,
        "first_step": 0.5,
    }
    told = describe(ENDS, warm=False, launched_at=100.0)
    assert told == (
        "cold start, 4.50 s to the first step: launch 1.50 s, interpreter 0.25 s, imports "
        "1.25 s, rendezvous 0.25 s, model build 0.75 s, first step 0.50 s"
    )
    # A folder the agent took over: it never knew when the ranks were launched.
    assert "launch" not in durations(ENDS, launched_at=None)
    assert describe(ENDS, warm=True, launched_at=None).startswith("warm start, 3.00 s")


def test_a_start_says_where_it_was_warm_and_why_it_was_not() -> None:
    in_sandbox = describe(ENDS, warm=True, launched_at=100.0, path=StartPath(sandbox=True))
    assert in_sandbox.startswith("warm start in a sandbox made before it, 4.50 s to the first")
    cold = describe(ENDS, warm=False, launched_at=100.0, path=StartPath(why_cold="no launcher"))
    assert cold.startswith("cold start, 4.50 s to the first step: launch 1.50 s")
    assert cold.endswith("first step 0.50 s; not warm: no launcher")
    # The ranks say whether they started warm; a reason for a cold start is only said then.
    assert describe(ENDS, warm=True, launched_at=100.0, path=StartPath(why_cold="x")).endswith(
        "first step 0.50 s"
    )


def test_a_phase_that_ends_before_it_began_is_left_out_not_negative() -> None:
    made_up = {**ENDS, "rendezvous": 50.0}
    spent = durations(made_up, launched_at=100.0)
    assert "rendezvous" not in spent
    assert spent["model_build"] == 1.0  # counted from the imports, the last end that held
    assert all(seconds >= 0 for seconds in spent.values())


def test_the_record_is_checked_like_every_other() -> None:
    accepted = parse(line(warm=True, ends=ENDS), 1)
    assert accepted == {"kind": "start_phases", "time": 1.0, "warm": True, "ends": ENDS}
    for bad in (
        {"warm": True, "ends": {**ENDS, "coffee": 1.0}},  # no such phase
        {"warm": True, "ends": {"launch": -1.0}},
        {"warm": "yes", "ends": ENDS},
        {"ends": ENDS},
        {"warm": False, "ends": ENDS, "extra": 1},
    ):
        assert isinstance(parse(line(**bad), 7), Rejected), bad
    assert len(PHASES) == len(ENDS)


def test_a_process_knows_when_it_was_created() -> None:
    before = time.time()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ampfleet.workers.start_phases import process_started_at as s; print(s())",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    after = time.time()
    tick = 0.02  # the kernel counts a process's start in clock ticks (10 ms)
    assert before - tick <= float(child.stdout) <= after + tick
