"""A rank process's stdout and stderr, into its own log files in the run folder, where the
node agent ships them to the database as they grow. Standard library only."""

from __future__ import annotations

import os
import sys

from ampfleet.workers.rundir import RunDir


def capture_output(run_dir: RunDir, rank: int) -> None:
    """Send this process's stdout and stderr (Python's and native libraries' alike, and
    those of the processes it starts) to the rank's own files."""
    run_dir.logs_dir.mkdir(parents=True, exist_ok=True)
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        target = os.open(run_dir.rank_log(rank, stream), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
