"""What the node agent knows of one attempt on this node: the launch it asked for
(`LaunchRequest`, from the start message's claim) and, once launched, the attempt as the
supervisor follows it (`RunningAttempt`: its processes, its records, its stop).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ampfleet.core.states import LAUNCHED_STATES, JobState
from ampfleet.workers import disk
from ampfleet.workers.containment import Contained
from ampfleet.workers.heartbeat import Beat
from ampfleet.workers.idle import IdleWatch
from ampfleet.workers.ingest import AttemptFeed
from ampfleet.workers.launch_trace import LaunchTrace
from ampfleet.workers.rundir import RecordReader, RunDir
from ampfleet.workers.telemetry import RankTelemetry

# The states a launched attempt's ranks may end from, by exiting on their own.
EXITABLE = LAUNCHED_STATES | {JobState.CANCELLING}


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    attempt: int
    node_rank: int
    nnodes: int
    procs_per_node: int
    rendezvous: str | None
    run_dir: RunDir
    max_runtime_s: int | None
    code_dir: str | None = None  # set: the ranks run bundled code, in the sandbox if on
    input_paths: tuple[str, ...] = ()  # the job's inputs on this node: read-only in the sandbox
    python: str | None = None  # the interpreter of its code.requirements, if it has any
    peers: tuple[str, ...] = ()
    """Every allocated node's address, this one's included: all a multi-node attempt's
    sandboxed ranks may connect to (containment.py, egress.py)."""
    checkpoint_dir: Path = field(kw_only=True)
    """The job's checkpoint folder on this node (the ranks write it)."""
    hang_timeout_s: float = field(kw_only=True)
    """The job's monitoring.hang_timeout_s, or the node's default (the agent chose)."""
    runtime_only: bool = False
    """max_runtime_s is how long to train: the ranks stop themselves and finish the run;
    the agent stops them (TIMED_OUT) only if they are still at it a preemption grace later."""
    script: bool = False
    """The job runs its `code.command` on every rank (script mode), not a recipe."""
    trace: LaunchTrace = field(default_factory=LaunchTrace.untraced, kw_only=True, compare=False)
    """This node's launch in the job's trace (launch_trace.py)."""


@dataclass
class RunningAttempt:
    request: LaunchRequest
    process: subprocess.Popen[bytes]
    launcher_log: IO[bytes]
    reader: RecordReader
    telemetry: RankTelemetry
    contained: Contained | None = None
    """Where it runs bundled code in the sandbox: its uid, limits, network."""
    gpus: tuple[int, ...] | None = None
    """The indices of this node's GPUs its ranks see (CUDA_VISIBLE_DEVICES)."""
    started: float = field(default_factory=time.monotonic)
    last_news: float = field(default_factory=time.time)
    """When rank 0 last reported anything (wall clock, as the ranks' heartbeats are)."""
    beats: list[Beat] = field(default_factory=list)
    """Each rank's last heartbeat, as last read: a rank that hangs stops beating, and so
    does every rank that waits for it in a collective."""
    heard_from: bool = False
    """A rank of this node has beaten, or rank 0 reported: start-up (imports, data,
    rendezvous) is over."""
    stop_reason: str | None = None  # cancel | timeout | superseded | preempt | hung
    kill_at: float | None = None
    feed: AttemptFeed = field(init=False)
    exited_at: float | None = None
    drained: bool = False
    """A pass that began after the ranks exited has read and committed all they wrote."""
    idle: IdleWatch = field(default_factory=IdleWatch)
    """Its project's idle policy, as this node sees its ranks."""
    failed_passes: int = 0
    """Passes in a row that failed for something other than the database."""
    finished: bool = False
    """Rank 0 wrote `finished`: the run is complete, the ranks are only shutting down."""
    disk_checked_at: float = 0.0
    disk_usage: disk.Usage | None = None
    """What its folders held at the last look (sandboxed attempts only)."""
    invalid_record: str | None = None
    """Why an essential record (`started`) was rejected: the attempt fails with it."""

    def __post_init__(self) -> None:
        self.feed = AttemptFeed(self.request.run_dir, self.reader)

    @property
    def folders(self) -> tuple[Path, ...]:
        """What its ranks may name in records: their run folder and the job's checkpoints."""
        return (self.request.run_dir.path, self.request.checkpoint_dir)

    @property
    def key(self) -> tuple[str, int]:
        return self.request.job_id, self.request.attempt
