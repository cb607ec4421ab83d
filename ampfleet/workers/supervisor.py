"""Supervises the attempts running on this node.

One long-lived thread launches torchrun for each attempt (PR_SET_PDEATHSIG is tied to the
thread that forks, so it must outlive the children), forwards rank 0's records to the
database in batches, enforces cancel and max runtime, and records how each attempt ended.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core import idle_policy
from ampfleet.core.allocations import release_node_share
from ampfleet.core.db import database_unavailable, session_scope
from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.memory import MB
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.models import Job
from ampfleet.core.node_health import HUNG, cordon_if_hanging
from ampfleet.core.settings import Settings
from ampfleet.core.states import LAUNCHED_STATES, SLOT_HOLDING_STATES, JobState
from ampfleet.workers import disk, egress
from ampfleet.workers.containment import (
    Contained,
    UidPool,
    attempt_memory_mb,
    report_limits,
)
from ampfleet.workers.gpus import GpuPool, device_nodes
from ampfleet.workers.heartbeat import Beat, describe, read_beats
from ampfleet.workers.idle import IdleWatch, act, busiest
from ampfleet.workers.ingest import (
    AttemptFeed,
    apply_one_by_one,
    apply_records,
    report_rejections,
    ship_logs,
    store_points,
)
from ampfleet.workers.launch import (
    RECIPE_RANK,
    SCRIPT_RANK,
    launch_command,
    rank_environment,
    torchrun_args,
)
from ampfleet.workers.launch_trace import LaunchTrace
from ampfleet.workers.local_launcher import Launch
from ampfleet.workers.parent_death import PARENT_PID_VARIABLE
from ampfleet.workers.profile_handover import hand_over_profiles
from ampfleet.workers.rundir import RecordReader, RunDir
from ampfleet.workers.telemetry import Nvml, RankTelemetry, node_totals
from ampfleet.workers.training.entry import STACKS_SIGNAL
from ampfleet.workers.uploads import ArtifactUploader
from ampfleet.workers.warm_pool import WarmPool, hand_over, start_launcher

log = logging.getLogger(__name__)
CAREFUL_AFTER_FAILED_PASSES = 2
"""Failed passes of one attempt (not the database's fault) before its records go one by one."""
HUNG_KILL_AFTER_S = 2.0
"""How long a hung attempt's ranks get between their stacks and SIGKILL."""
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


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        rank_memory_limit_mb: int | None = None,
        gpus: int = 0,
        slot_memory_mb: int | None = None,
    ) -> None:
        """`gpus`: how many this node has; each attempt gets indices of its own.
        `slot_memory_mb`: one slot's share of the host's memory, for sandboxes' cgroups."""
        self.settings = settings
        self.slot_memory_mb = slot_memory_mb or rank_memory_limit_mb
        self.uids = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        self.gpus = GpuPool(gpus) if gpus else None
        self.rank_memory_limit_mb = rank_memory_limit_mb
        self._requests: queue.Queue[LaunchRequest] = queue.Queue()
        self._running: dict[tuple[str, int], RunningAttempt] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._last_sync = 0.0
        self.uploads = ArtifactUploader(settings)
        self.nvml = Nvml.open()
        self.warm = WarmPool(settings.data_dir.resolve() / "warm-launcher.log")

    def start(self) -> None:
        self._clear_stale_egress()
        self.uploads.start()
        self._thread.start()

    def _clear_stale_egress(self) -> None:
        """Egress rules of this node's uids left by a worker (or doctor) that died with an
        attempt: none is held now, so no rule of theirs stays to refuse the next attempt."""
        if egress.problem() is not None:
            return
        first, count = self.settings.sandbox_first_uid, self.settings.sandbox_uid_count
        if cleared := egress.clear_stale(first, count):
            log.info("cleared the stale egress rules of uids %s", cleared)

    def launch(self, request: LaunchRequest) -> None:
        """Launches once this node holds the job's latest stored checkpoint."""
        self.uploads.restore_then(request.job_id, lambda: self._requests.put(request))

    def node_telemetry(self) -> dict[str, float]:
        """What this node's ranks use now, for its heartbeat (another thread: a snapshot)."""
        return node_totals(a.telemetry.latest for a in list(self._running.values()))

    def shutdown(self, reason: str = "node_shutdown", message: str | None = None) -> None:
        """Preempt every attempt (they checkpoint and go back to the queue), then stop."""
        message = message or f"node {self.settings.node_name} is shutting down"
        for attempt in list(self._running.values()):
            with session_scope() as session:
                transition(
                    session,
                    attempt.request.job_id,
                    JobState.PREEMPTED,
                    from_states=LAUNCHED_STATES,
                    attempt=attempt.request.attempt,
                    reason=reason,
                    message=message,
                )
            self._stop_attempt(attempt, "preempt")
        deadline = time.monotonic() + self.settings.preempt_grace_s + 5
        while self._running and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop.set()
        self._thread.join(timeout=10)
        self.warm.close()
        self.uploads.stop(timeout=10)

    # -- the loop -------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._launch_pending()
                self._fill_warm_pool()
                due = time.monotonic() - self._last_sync >= self.settings.metrics_flush_s
                if due or self._newly_exited():
                    self._sync()
                    self._last_sync = time.monotonic()
                self._enforce_kill_deadlines()
            except Exception:
                log.exception("supervisor pass failed; retrying")
                time.sleep(1.0)
            time.sleep(0.05)

    def _launch_pending(self) -> None:
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                with request.trace.current():
                    self._running[(request.job_id, request.attempt)] = self._spawn(request)
                request.trace.spawned()
            except Exception as exc:
                log.exception("could not launch %s attempt %s", request.job_id, request.attempt)
                request.trace.failed(f"the node could not launch the ranks: {exc}")
                with session_scope() as session:
                    transition(
                        session,
                        request.job_id,
                        JobState.FAILED,
                        from_states=LAUNCHED_STATES,
                        attempt=request.attempt,
                        reason="launch_failed",
                        message=f"the node could not launch the ranks: {exc}",
                        failure_reason=f"launch failed on node {self.settings.node_name}: {exc}",
                    )
                    release_node_share(session, request.job_id, request.attempt, request.node_rank)

    def _spawn(self, request: LaunchRequest) -> RunningAttempt:
        run_dir = request.run_dir
        run_dir.logs_dir.mkdir(parents=True, exist_ok=True)
        args = torchrun_args(
            run_dir=str(run_dir.path),
            nnodes=request.nnodes,
            procs_per_node=request.procs_per_node,
            rendezvous=request.rendezvous,
            rendezvous_id=f"{request.job_id}-{request.attempt}",
            is_host=request.node_rank == 0,
            local_addr=self.settings.node_address,
            logs_dir=str(run_dir.logs_dir),
            rank_entry=SCRIPT_RANK if request.script else RECIPE_RANK,
        )
        launcher_log = (run_dir.logs_dir / "launcher.log").open("ab")
        command = launch_command(
            args, memory_limit_mb=self.rank_memory_limit_mb, python=request.python
        )
        contained_code = request.code_dir is not None and self.settings.sandbox == "bubblewrap"
        gpus = self.gpus.take(request.procs_per_node) if self.gpus else None
        try:
            return self._start(request, command, launcher_log, contained_code, gpus)
        except BaseException:
            if gpus and self.gpus:
                self.gpus.give_back(gpus)
            raise

    def _start(
        self,
        request: LaunchRequest,
        command: list[str],
        launcher_log: IO[bytes],
        contained_code: bool,
        gpus: tuple[int, ...] | None,
    ) -> RunningAttempt:
        run_dir = request.run_dir
        contained = self._contain(request) if contained_code else None
        env = {
            **self._rank_environment(request.procs_per_node),
            **(_visible(gpus) if gpus else {}),
            **(contained.environment() if contained else {}),
        }
        if contained is not None:  # inside the sandbox's PID namespace the worker has no pid
            del env[PARENT_PID_VARIABLE]
        launched_at = time.time()
        try:
            if contained is None and self._launches_locally(request):
                process = self._launch_locally(request, env, launcher_log)
            else:
                process = subprocess.Popen(
                    command
                    if contained is None
                    else self._sandboxed(command, request, contained, gpus),
                    # bwrap would die of the preemption signal; the launcher and ranks set
                    # their own.
                    preexec_fn=contained.enter if contained else None,  # noqa: PLW1509
                    pass_fds=contained.pass_fds if contained else (),
                    stdout=launcher_log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: cancel signals every rank
                    env=env,
                )
        except BaseException:
            if contained is not None:
                contained.close()
            raise
        if contained is not None:
            contained.launched()
        log.info("launched %s attempt %s (pid %s)", request.job_id, request.attempt, process.pid)
        telemetry = RankTelemetry(process.pid, self.settings.telemetry_interval_s, self.nvml)
        reader = RecordReader(run_dir.events_file)
        attempt = RunningAttempt(request, process, launcher_log, reader, telemetry, contained, gpus)
        attempt.feed.launched_at = launched_at
        return attempt

    def _rank_environment(self, procs_per_node: int) -> dict[str, str]:
        """What a launcher and its ranks get from this worker; outside a sandbox the
        launcher can check that its parent is this process."""
        return {
            **rank_environment(
                os.environ, procs_per_node=procs_per_node, node_address=self.settings.node_address
            ),
            PARENT_PID_VARIABLE: str(os.getpid()),
        }

    def _launches_locally(self, request: LaunchRequest) -> bool:
        """Single-node attempts of installed recipes start without torchrun (warm_pool.py
        says why only those)."""
        return (
            self.settings.rank_launcher != "torchrun"
            and request.nnodes == 1
            and request.code_dir is None
            and request.python is None
            and not request.script
        )

    def _launch_locally(
        self, request: LaunchRequest, env: dict[str, str], launcher_log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        launch = Launch(
            run_dir=str(request.run_dir.path),
            procs=request.procs_per_node,
            entry=RECIPE_RANK,
            environment=env,
            memory_limit_mb=self.rank_memory_limit_mb,
            log=str(request.run_dir.logs_dir / "launcher.log"),
        )
        warm = self.warm.take() if self.settings.rank_launcher == "warm" else None
        if warm is None:
            return start_launcher(launch, stdout=launcher_log, env=env)
        hand_over(warm, launch)
        return warm

    def _fill_warm_pool(self) -> None:
        """A warm launcher for the next attempt, once no attempt here is still starting
        (its imports would compete with theirs) and none waits to be launched."""
        if self.settings.rank_launcher != "warm" or not self._requests.empty():
            return
        if any(not a.heard_from and a.process.poll() is None for a in self._running.values()):
            return
        self.warm.fill(self._rank_environment(procs_per_node=1))

    def _contain(self, request: LaunchRequest) -> Contained:
        return Contained.prepare(
            self.settings,
            self.uids,
            name=f"{request.job_id}-{request.attempt}-{request.node_rank}",
            nnodes=request.nnodes,
            memory_mb=attempt_memory_mb(self.slot_memory_mb, request.procs_per_node),
            writable=[request.run_dir.path, request.checkpoint_dir],
            peers=request.peers,
        )

    def _sandboxed(
        self,
        command: list[str],
        request: LaunchRequest,
        contained: Contained,
        gpus: tuple[int, ...] | None,
    ) -> list[str]:
        # A requirements environment, read-only: <env>/bin/python is its interpreter.
        extra = [Path(request.python).parent.parent] if request.python else []
        code = [Path(request.code_dir)] if request.code_dir else []
        return contained.command(
            command,
            self.settings,
            writable=[request.run_dir.path, request.checkpoint_dir],
            readable=[*code, *map(Path, request.input_paths), *extra],
            devices=device_nodes(gpus),
        )

    def _sync(self) -> None:
        """Records in, decisions out: each attempt in a transaction of its own, so nothing
        one attempt writes can hold up another's reporting, cancel or outcome."""
        if not self._running:
            return
        with session_scope() as session:
            hand_over_profiles(session, {a.key: a.request.run_dir for a in self._running.values()})
        ended = [a.key for a in list(self._running.values()) if self._sync_and_end(a)]
        for key in ended:
            attempt = self._running.pop(key)
            attempt.launcher_log.close()
            if attempt.gpus and self.gpus:
                self.gpus.give_back(attempt.gpus)
        if ended:
            wake_scheduler()  # slots were freed

    def _newly_exited(self) -> bool:
        """Whether an attempt's ranks exited since its last pass: its end is recorded now,
        not at the next interval (a pass that failed waits for it, as every other does)."""
        return any(
            attempt.process.poll() is not None and not attempt.drained and not attempt.failed_passes
            for attempt in self._running.values()
        )

    def _sync_and_end(self, attempt: RunningAttempt) -> bool:
        """One pass; the pass that drained an exited attempt (read and committed all it
        wrote) is followed at once by the one that records its end, where nothing it
        handed over is still uploading."""
        drained = attempt.drained
        return self._sync_attempt(attempt) or (
            attempt.drained and not drained and self._sync_attempt(attempt)
        )

    def _sync_attempt(self, attempt: RunningAttempt) -> bool:
        """One attempt's pass; whether it ended (its outcome is recorded, its slots free).

        A pass that fails is read again by the next, unless it failed for something the
        attempt's ranks wrote rather than for the database: then the attempt's passes go one
        record at a time (`careful`), and the record that fails is rejected (ingest.py)."""
        exited = attempt.process.poll() is not None
        finished = exited and self._ready_to_end(attempt)
        try:
            with session_scope() as session:
                self._forward(session, attempt)
                if not exited:
                    self._check_should_stop(attempt, self._current_state(session, attempt))
                if finished:
                    self._record_outcome(session, attempt)
        except Exception as exc:
            attempt.feed.rollback()  # nothing read in this pass was stored: read it again
            if database_unavailable(exc):
                raise
            attempt.failed_passes += 1
            log.exception("%s attempt %s: pass %d failed", *attempt.key, attempt.failed_passes)
            return False
        attempt.failed_passes = 0
        attempt.feed.commit()
        self.uploads.submit(attempt.key, attempt.feed.take_artifacts(), attempt.folders)
        if exited:
            attempt.drained = True
        return finished

    def _ready_to_end(self, attempt: RunningAttempt) -> bool:
        """Whether to record how an exited attempt ended: once all it wrote was read and
        its uploads are done (a job is SUCCEEDED with its model listed, requeued with its
        last checkpoint in the store), or it waited for them long enough."""
        now = time.monotonic()
        attempt.exited_at = attempt.exited_at or now
        if not attempt.drained:
            return False
        if self.uploads.settled(attempt.key):
            return True
        if now - attempt.exited_at < self.settings.checkpoint_upload_timeout_s:
            return False
        log.warning("%s attempt %s ends with artifact uploads still pending", *attempt.key)
        return True

    def _current_state(self, session: Session, attempt: RunningAttempt) -> tuple[str, int] | None:
        row = session.execute(
            select(Job.state, Job.attempt).where(Job.id == attempt.request.job_id)
        ).first()
        return None if row is None else (row[0], row[1])

    def _check_should_stop(self, attempt: RunningAttempt, current: tuple[str, int] | None) -> None:
        if attempt.stop_reason:
            return
        request = attempt.request
        if (
            current is None
            or current[1] != request.attempt
            or JobState(current[0]) not in SLOT_HOLDING_STATES
        ):
            # Over (ended, or requeued by the reaper or a peer node): never two at once.
            self._stop_attempt(attempt, "superseded")
        elif current[0] == JobState.CANCELLING:
            self._stop_attempt(attempt, "cancel")
        elif current[0] == JobState.PREEMPTED:
            self._stop_attempt(attempt, "preempt")
        elif self._past_runtime(attempt):
            self._stop_attempt(attempt, "timeout")
        elif self._over_disk_limit(attempt):
            self._stop_attempt(attempt, "disk_limit")
        elif attempt.finished:
            # The run is complete and recorded: silence now is the ranks shutting down (a
            # loaded node, a long garbage collection), never a hang. They get a grace.
            if self._silent_for(attempt) > self._exit_grace(attempt):
                self._stop_attempt(attempt, "finished")
        elif self._silent_for(attempt) > self._silence_allowed(attempt):
            self._stop_attempt(attempt, "hung")

    def _past_runtime(self, attempt: RunningAttempt) -> bool:
        """Past stop.max_runtime_s; a runtime-only job's ranks get a grace after it to
        evaluate, checkpoint and export: the same grace a preempted job gets to checkpoint."""
        request = attempt.request
        if not request.max_runtime_s:
            return False
        grace = self.settings.preempt_grace_s if request.runtime_only else 0.0
        return time.monotonic() - attempt.started > request.max_runtime_s + grace

    def _silent_for(self, attempt: RunningAttempt) -> float:
        """Seconds since any rank of this node beat, or rank 0 last reported, if later."""
        attempt.beats = read_beats(attempt.request.run_dir.path) or attempt.beats
        if attempt.beats:
            attempt.heard_from = True
        latest = max([attempt.last_news, *(beat.time for beat in attempt.beats)])
        return time.time() - latest

    def _silence_allowed(self, attempt: RunningAttempt) -> float:
        """The hang timeout is for a running job; until its ranks first beat or report, they
        are still starting (importing torch, building data, meeting at the rendezvous), which
        on a busy node can outlast a short hang timeout, so start-up gets the start timeout."""
        if attempt.heard_from:
            return attempt.request.hang_timeout_s
        return max(attempt.request.hang_timeout_s, self.settings.start_timeout_s)

    def _over_disk_limit(self, attempt: RunningAttempt) -> bool:
        """Whether a sandboxed attempt's folders hold more than its disk limit (measured
        every few seconds: disk.py); `disk_usage` keeps what was found."""
        now = time.monotonic()
        if attempt.contained is None or now - attempt.disk_checked_at < disk.CHECK_EVERY_S:
            return False
        attempt.disk_checked_at = now
        attempt.disk_usage = disk.usage(attempt.folders)
        limit = self.settings.sandbox_max_disk_mb * MB
        return attempt.disk_usage.bytes > limit or not attempt.disk_usage.complete

    def _exit_grace(self, attempt: RunningAttempt) -> float:
        """How long ranks that finished may take to exit before they are stopped."""
        return max(attempt.request.hang_timeout_s, self.settings.start_timeout_s)

    def _stop_attempt(self, attempt: RunningAttempt, reason: str) -> None:
        if attempt.stop_reason:
            return
        attempt.stop_reason = reason
        log.info("stopping %s attempt %s: %s", *attempt.key, reason)
        if reason == "hung":
            # Every rank's stacks into its stderr log, before it stops: which one hung
            # where, and which wait for it in a collective.
            for pid in attempt.telemetry.rank_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, STACKS_SIGNAL)
        if reason == "preempt":
            # SIGUSR1: the ranks checkpoint at the next step boundary and exit (entry.py).
            attempt.kill_at = time.monotonic() + self.settings.preempt_grace_s
            _signal_group(attempt.process, signal.SIGUSR1)
        elif reason == "hung":
            # A hung rank, and the ranks waiting for it inside a collective, are in C code:
            # Python never runs their SIGTERM handler, so the cancel grace would only delay
            # the restart. Their stacks come from faulthandler's own signal handler at once.
            attempt.kill_at = time.monotonic() + HUNG_KILL_AFTER_S
            _signal_group(attempt.process, signal.SIGTERM)
        else:
            attempt.kill_at = time.monotonic() + self.settings.cancel_grace_s
            _signal_group(attempt.process, signal.SIGTERM)

    def _enforce_kill_deadlines(self) -> None:
        now = time.monotonic()
        for attempt in self._running.values():
            if attempt.kill_at and now >= attempt.kill_at and attempt.process.poll() is None:
                _signal_group(attempt.process, signal.SIGKILL)
                attempt.kill_at = None

    # -- records and outcomes -------------------------------------------------------------

    def _forward(self, session: Session, attempt: RunningAttempt) -> None:
        """Rank 0's new records and every rank's new log lines, into this transaction (the
        feed moves past them only once it commits: see `_sync`)."""
        request = attempt.request
        job = session.get(Job, request.job_id)
        if job is None or job.attempt != request.attempt:
            return  # fenced out: left unread, for the next attempt to adopt what it covers
        records = attempt.reader.read_new()
        request.trace.observe(records)
        if records:
            attempt.last_news = time.time()
            attempt.heard_from = True
            attempt.finished = attempt.finished or any(r["kind"] == "finished" for r in records)
        essential = report_rejections(session, job, attempt.feed, attempt.reader.rejected)
        if essential is not None:
            attempt.invalid_record = essential.describe(request.run_dir.events_file.name)
            self._stop_attempt(attempt, "invalid_record")
        if attempt.failed_passes >= CAREFUL_AFTER_FAILED_PASSES:
            apply_one_by_one(session, job, request.attempt, records, attempt.feed, self.settings)
        else:
            apply_records(session, job, request.attempt, records, attempt.feed, self.settings)
        ship_logs(session, job, request.attempt, attempt.feed, self.settings)
        sampled = attempt.telemetry.take(job.step)
        if store_points(session, job, request.attempt, sampled, self.settings):
            job.latest_metrics = {**(job.latest_metrics or {}), **{n: v for _, n, v in sampled}}
        self._watch_idle(session, job, attempt)

    def _watch_idle(self, session: Session, job: Job, attempt: RunningAttempt) -> None:
        """The project's idle policy (idle.py) on each new telemetry sample, once the ranks
        are past start-up; read then, so that a change applies to running jobs."""
        telemetry = attempt.telemetry
        if not attempt.idle.fresh(telemetry.sampled_at):
            return
        policy = idle_policy.of_project(session, job.project)
        if policy is None or not attempt.heard_from or attempt.stop_reason:
            attempt.idle.forget()
            return
        utilisation = busiest(telemetry.latest)
        verdict = attempt.idle.observe(policy, telemetry.sampled_at, utilisation)
        if verdict is not None and utilisation is not None:
            act(session, job, verdict, policy, utilisation, self.settings.node_name)

    def _record_outcome(self, session: Session, attempt: RunningAttempt) -> None:
        """How the attempt ended, and this node's slots back: every rank here has exited."""
        self._forward(session, attempt)
        if attempt.contained is not None:  # its limits first: they may say why it ended
            report_limits(
                session, attempt.contained, attempt.request.job_id, self.settings.node_name
            )
        self._record_ending(session, attempt)
        request = attempt.request
        if attempt.contained is not None:
            attempt.contained.close()
        release_node_share(session, request.job_id, request.attempt, request.node_rank)
        request.trace.ended()

    def _record_ending(self, session: Session, attempt: RunningAttempt) -> None:
        request = attempt.request
        job_id, number = attempt.key
        code = attempt.process.returncode
        log.info("%s attempt %s exited with %s (%s)", job_id, number, code, attempt.stop_reason)
        if attempt.stop_reason == "cancel":
            transition(
                session,
                job_id,
                JobState.CANCELLED,
                from_states={JobState.CANCELLING},
                attempt=number,
                reason="cancelled",
                message="every rank stopped",
            )
        elif attempt.stop_reason == "timeout":
            transition(
                session,
                job_id,
                JobState.TIMED_OUT,
                from_states=EXITABLE,
                attempt=number,
                reason="max_runtime",
                message=f"ran longer than stop.max_runtime_s={request.max_runtime_s}"
                + (
                    f" and the {self.settings.preempt_grace_s:.0f}s it gets to finish after it"
                    if request.runtime_only
                    else ""
                ),
                failure_reason=f"exceeded max_runtime_s={request.max_runtime_s}",
            )
        elif attempt.stop_reason == "hung":
            self._record_hang(session, attempt)
        elif attempt.stop_reason == "preempt":
            self._record_preempted(session, attempt)
        elif attempt.stop_reason == "disk_limit":
            used = attempt.disk_usage
            reason = (
                f"its run and checkpoint folders on node {self.settings.node_name} held "
                + (f"{used.bytes // MB:,} MB" if used and used.complete else "too many files")
                + f", over the limit of {self.settings.sandbox_max_disk_mb:,} MB "
                "(AMPFLEET_SANDBOX_MAX_DISK_MB)"
            )
            transition(
                session,
                job_id,
                JobState.FAILED,
                from_states=EXITABLE,
                attempt=number,
                reason="disk_limit",
                message=reason,
                failure_reason=reason,
            )
        elif attempt.stop_reason == "invalid_record":
            reason = f"rank 0 wrote a record the platform cannot accept: {attempt.invalid_record}"
            transition(
                session,
                job_id,
                JobState.FAILED,
                from_states=EXITABLE,
                attempt=number,
                reason="invalid_record",
                message=reason,
                failure_reason=reason,
            )
        elif code == 0 or attempt.stop_reason == "finished":
            # Stopped after `finished`: the run and its export were complete before.
            transition(
                session,
                job_id,
                JobState.SUCCEEDED,
                from_states=EXITABLE,
                attempt=number,
                reason="completed",
                message="training finished"
                + (
                    f"; its ranks were stopped {self._exit_grace(attempt):.0f}s after it as they "
                    "had not exited"
                    if attempt.stop_reason == "finished"
                    else ""
                ),
            )
        else:
            self._record_failure(session, attempt, code)

    def _record_hang(self, session: Session, attempt: RunningAttempt) -> None:
        """Restart it (or fail it, past its restarts), saying where each rank was; a node
        where attempts keep hanging is cordoned."""
        request = attempt.request
        where = describe(attempt.beats, time.time()) if attempt.beats else "no rank had beaten"
        requeue_or_fail(
            session,
            request.job_id,
            request.attempt,
            reason=HUNG,
            message=f"no rank on node {self.settings.node_name} moved on for "
            f"{attempt.request.hang_timeout_s:.0f}s (the hang timeout): {where}. The rank "
            "furthest behind is the likely culprit, the others wait for it in a collective; "
            "each rank's Python stacks at the hang are in its stderr log",
        )
        job = session.get(Job, request.job_id)
        if job is not None:
            cordon_if_hanging(session, self.settings.node_name, job, self.settings)

    def _record_preempted(self, session: Session, attempt: RunningAttempt) -> None:
        job_id, number = attempt.key
        if transition(
            session,
            job_id,
            JobState.CANCELLED,
            from_states={JobState.CANCELLING},
            attempt=number,
            reason="cancelled",
            message="cancelled while being preempted; every rank stopped",
        ):
            return
        where = (
            f"checkpointed at step {attempt.feed.preempted_at_step}"
            if attempt.feed.preempted_at_step is not None
            else "stopped before it could checkpoint; resumes from its last checkpoint"
        )
        transition(
            session,
            job_id,
            JobState.QUEUED,
            from_states={JobState.PREEMPTED},
            attempt=number,
            reason="requeued_after_preemption",
            message=f"{where}; back in the queue",
        )

    def _record_failure(self, session: Session, attempt: RunningAttempt, code: int) -> None:
        job_id, number = attempt.key
        failures = attempt.request.run_dir.failures()
        if failures:
            # The recipe or the loop raised: deterministic, so retrying would fail again.
            first = failures[0]
            reason = f"rank {first['rank']}: {first['type']}: {first['message']}"
            transition(
                session,
                job_id,
                JobState.FAILED,
                from_states=EXITABLE,
                attempt=number,
                reason="training_error",
                message=reason,
                failure_reason=reason,
            )
            return
        # No exception was recorded: the ranks were killed (OOM killer, signal, lost peer).
        requeue_or_fail(
            session,
            job_id,
            number,
            reason="ranks_lost",
            message=f"the ranks on node {self.settings.node_name} exited with code {code} "
            f"without an error report (killed or out of memory?)",
        )


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _visible(gpus: tuple[int, ...]) -> dict[str, str]:
    """The attempt's GPUs for CUDA, numbered as the driver's device nodes are (PCI order),
    so the indices mean the same devices as the /dev/nvidia<N> the sandbox binds."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
