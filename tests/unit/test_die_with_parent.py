"""A rank (or launcher) whose parent died while it was still importing exits as soon as it
checks, instead of training as an orphan beside the attempt that replaced it: the parent it
must have is the one its starter named (TRAINING_PARENT_PID), not whoever adopted it."""

from __future__ import annotations

import os
import subprocess
import sys

from ampfleet.workers.parent_death import PARENT_PID_VARIABLE

CHILD = (
    "from ampfleet.workers.parent_death import die_with_parent; die_with_parent(); print('alive')"
)


def run_child(parent_pid: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != PARENT_PID_VARIABLE}
    if parent_pid is not None:
        env[PARENT_PID_VARIABLE] = parent_pid
    return subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_child_of_the_named_parent_goes_on() -> None:
    kept = run_child(str(os.getpid()))
    assert (kept.returncode, kept.stdout.strip()) == (0, "alive")
    unnamed = run_child(None)  # started by hand: its first parent is the one it checks
    assert (unnamed.returncode, unnamed.stdout.strip()) == (0, "alive")


def test_a_child_whose_named_parent_is_not_its_parent_exits() -> None:
    orphaned = run_child("1")  # as if its starter had died and it was handed to another
    assert orphaned.returncode == 1
    assert "alive" not in orphaned.stdout
