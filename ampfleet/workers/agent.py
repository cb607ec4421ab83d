"""The node agent: registers this node, heartbeats, and turns start messages into runs.

A start message names a row (job, attempt, node rank). It is claimed with a conditional
UPDATE on the allocation, so a duplicate or stale message changes nothing and launches
nothing. Rank processes are supervised outside the Celery task, which returns at once:
a multi-hour run is never a late-acked task that a broker could redeliver, and a node that
waits for its peers' rendezvous (workers/rendezvous.py) still accepts other messages. A
claim that launches nothing gives this node's slots back in the same transaction.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core.allocations import release_claimed_on_node, release_node_share
from ampfleet.core.artifacts import catalog
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import requeue_or_fail, transition
from ampfleet.core.memory import slot_memory_mb
from ampfleet.core.models import Allocation, Job, Node, utcnow
from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import Settings
from ampfleet.core.spec import Stop
from ampfleet.core.states import LAUNCHED_STATES, JobState
from ampfleet.workers.attempts import LaunchRequest
from ampfleet.workers.bundles import bundle_dir, ensure_unpacked
from ampfleet.workers.fallbacks import earlier_fallbacks
from ampfleet.workers.hardware_precision import script_hardware
from ampfleet.workers.ingest import store_setup_output
from ampfleet.workers.initial_checkpoint import ensure_initial, for_ranks, local_folder
from ampfleet.workers.inputs import ensure_inputs, local_paths
from ampfleet.workers.launch_trace import LaunchTrace
from ampfleet.workers.node import Capacity, detect_capacity
from ampfleet.workers.rendezvous import RendezvousWaiter
from ampfleet.workers.requirements import (
    RequirementsError,
    ensure_env,
    env_dir,
    env_python,
)
from ampfleet.workers.rundir import RunDir
from ampfleet.workers.supervisor import Supervisor

log = logging.getLogger(__name__)
COLLECTIVE_TIMEOUT_MARGIN_S = 60.0
"""A job's collectives time out this long after its hang timeout: the node agent's hang
detection (with every rank's stacks) comes first, and the process group's own timeout is the
backstop where the agent cannot act (its node cut off from the database)."""
RENDEZVOUS_WAIT_S = 60.0


class NodeAgent:
    def __init__(self, settings: Settings, capacity: Capacity | None = None) -> None:
        self.settings = settings
        self.capacity = capacity or detect_capacity(settings)
        gpus = self.capacity.slots if self.capacity.accelerator == "cuda" else 0
        slot_memory = slot_memory_mb(self.capacity.memory_mb, self.capacity.slots)
        self.supervisor = Supervisor(
            settings, self.capacity.rank_memory_limit_mb, gpus, slot_memory_mb=slot_memory
        )
        self.rendezvous = RendezvousWaiter(self.supervisor.launch, RENDEZVOUS_WAIT_S)
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    @property
    def node_id(self) -> str:
        return self.settings.node_name

    def start(self) -> None:
        with session_scope() as session:
            self._register(session)
            self._recover_orphans(session)
        self.supervisor.start()
        self.rendezvous.start()
        self._heartbeat.start()
        log.info(
            "node %s ready: %d %s slot(s) on queue %s",
            self.node_id,
            self.capacity.slots,
            self.capacity.accelerator,
            self.settings.node_queue,
        )

    def stop(self, reason: str = "node_shutdown", message: str | None = None) -> None:
        """Preempt what runs here (`reason`, `message`: the events' words), then stop."""
        self.rendezvous.stop()
        self.supervisor.shutdown(reason, message)
        self._stop.set()
        self._heartbeat.join(timeout=5)

    def _register(self, session: Session) -> None:
        node = session.get(Node, self.node_id)
        fields = {
            "queue": self.settings.node_queue,
            "address": self.settings.node_address,
            "accelerator": self.capacity.accelerator,
            "slots": self.capacity.slots,
            "gpu_model": self.capacity.gpu_model,
            "gpu_memory_mb": self.capacity.gpu_memory_mb,
            "memory_mb": self.capacity.memory_mb,
            "labels": self.settings.node_labels,
            "last_heartbeat_at": utcnow(),
        }
        if node is None:
            session.add(Node(id=self.node_id, state="ready", registered_at=utcnow(), **fields))
        else:
            for name, value in fields.items():
                setattr(node, name, value)

    def _recover_orphans(self, session: Session) -> None:
        """Attempts this node had launched before it restarted died with their worker, and
        so did their ranks: requeue them, and give their slots back."""
        orphans = session.execute(
            select(Allocation.job_id, Allocation.attempt).where(
                Allocation.node_id == self.node_id,
                Allocation.released_at.is_(None),
                Allocation.launched_at.is_not(None),
            )
        ).all()
        for job_id, attempt in orphans:
            requeue_or_fail(
                session,
                job_id,
                attempt,
                reason="node_restarted",
                message=f"node {self.node_id} restarted while running this attempt",
            )
        release_claimed_on_node(session, self.node_id)

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            try:
                with session_scope() as session:
                    result = session.execute(
                        update(Node)
                        .where(Node.id == self.node_id)
                        .values(
                            last_heartbeat_at=utcnow(), telemetry=self.supervisor.node_telemetry()
                        )
                    )
                    if result.rowcount == 0:  # type: ignore[attr-defined]
                        self._register(session)
            except Exception:
                log.warning("heartbeat failed; retrying", exc_info=True)

    # -- start messages -------------------------------------------------------------------

    def handle_start(
        self,
        job_id: str,
        attempt: int,
        node_rank: int,
        trace_context: dict[str, str] | None = None,
    ) -> None:
        """Claim and hand over; never waits (it runs on one of the Celery threads).
        `trace_context`: the placement's, which this launch continues (launch_trace.py)."""
        launch = LaunchTrace.begin(
            trace_context, job_id=job_id, attempt=attempt, node=self.node_id, node_rank=node_rank
        )
        try:
            with launch.current():
                self._start(job_id, attempt, node_rank, launch)
        except Exception as error:
            launch.failed(f"{type(error).__name__}: {error}")
            raise

    def _start(self, job_id: str, attempt: int, node_rank: int, launch: LaunchTrace) -> None:
        request = self._claim(job_id, attempt, node_rank, launch)
        if request is None:
            launch.not_launched("stale, duplicate, or no longer wanted")
            return
        if not self._code_ready(request):
            return
        request = self._initial_checkpoint_ready(request)
        if request is None:
            return
        if request.rendezvous is None and request.nnodes > 1:
            self.rendezvous.wait_for(request)
        else:
            self.supervisor.launch(request)

    def _claim(
        self, job_id: str, attempt: int, node_rank: int, launch: LaunchTrace | None = None
    ) -> LaunchRequest | None:
        """Claim this node's allocation (once) and prepare the run folder; None when the
        message is stale, a duplicate, or the job was cancelled or preempted meanwhile."""
        with session_scope() as session:
            claimed = session.execute(
                update(Allocation)
                .where(
                    Allocation.job_id == job_id,
                    Allocation.attempt == attempt,
                    Allocation.node_rank == node_rank,
                    Allocation.node_id == self.node_id,
                    Allocation.launched_at.is_(None),
                    Allocation.released_at.is_(None),
                )
                .values(launched_at=utcnow())
            ).rowcount  # type: ignore[attr-defined]
            if claimed != 1:
                log.info("ignoring stale or duplicate start of %s attempt %s", job_id, attempt)
                return None
            job = session.get(Job, job_id)
            if job is None or job.attempt != attempt or not self._still_wanted(session, job):
                release_node_share(session, job_id, attempt, node_rank)
                return None
            allocations = session.scalars(
                select(Allocation)
                .where(Allocation.job_id == job_id, Allocation.attempt == attempt)
                .order_by(Allocation.node_rank)
            ).all()
            peers = self._peers(session, allocations)
            rendezvous = None
            if node_rank == 0 and len(allocations) > 1:
                rendezvous = f"{self.settings.node_address}:{_free_port()}"
                allocations[0].rendezvous = rendezvous
            brought = self._brought(job)
            brought["earlier_fallbacks"] = earlier_fallbacks(session, job.id, job.attempt)
            brought["node"] = self.node_id  # the ranks gather which rank runs where
            run_dir = self._prepare_run_dir(job, node_rank, brought)
            stop = Stop.model_validate(job.resolved["stop"])
            script = bool((job.resolved.get("code") or {}).get("command"))
            return LaunchRequest(
                job_id=job_id,
                attempt=attempt,
                node_rank=node_rank,
                nnodes=len(allocations),
                procs_per_node=allocations[node_rank].slots,
                rendezvous=rendezvous,
                run_dir=run_dir,
                max_runtime_s=stop.max_runtime_s,
                # A script's max_runtime_s is always a limit: it decides when it is done.
                runtime_only=stop.runtime_only and not script,
                script=script,
                hang_timeout_s=self._hang_timeout_s(job),
                checkpoint_dir=self.settings.checkpoints_dir / job_id,
                code_dir=brought.get("code_dir"),
                input_paths=tuple(brought["inputs"].values()),
                python=brought.get("python"),
                peers=peers,
                trace=launch or LaunchTrace.untraced(),
            )

    def _peers(self, session: Session, allocations: Sequence[Allocation]) -> tuple[str, ...]:
        """The addresses of the attempt's nodes, this one's included (a multi-node attempt's
        sandboxed ranks reach these only: egress.py)."""
        if len(allocations) < 2:
            return ()
        ids = [a.node_id for a in allocations]
        nodes = session.scalars(select(Node).where(Node.id.in_(ids))).all()
        return tuple(dict.fromkeys([self.settings.node_address, *(n.address for n in nodes)]))

    def _still_wanted(self, session: Session, job: Job) -> bool:
        """Move the job to STARTING, unless a cancel or a preemption got there first; then
        releasing this node's share (core/allocations.py) ends the job once no node holds
        any, whichever way the cancel and this claim interleaved."""
        transition(
            session,
            job.id,
            JobState.STARTING,
            from_states={JobState.SCHEDULED},
            attempt=job.attempt,
            reason="launching",
            message=f"node {self.node_id} is launching its ranks",
        )
        session.refresh(job)
        return JobState(job.state) in LAUNCHED_STATES

    def _prepare_run_dir(self, job: Job, node_rank: int, brought: dict[str, Any]) -> RunDir:
        run_dir = RunDir.for_attempt(self.settings.runs_dir, job.id, job.attempt, node_rank)
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run_dir.job_file.write_text(
            json.dumps(
                {
                    "job_id": job.id,
                    "attempt": job.attempt,
                    "spec": job.resolved,
                    "checkpoint_dir": str(self.settings.checkpoints_dir / job.id),
                    "process_group_timeout_s": self._hang_timeout_s(job)
                    + COLLECTIVE_TIMEOUT_MARGIN_S,
                    "metrics_flush_s": self.settings.metrics_flush_s,
                    # How long preempted ranks have before SIGKILL (a script's rank gives
                    # the script most of it: training/script.py).
                    "stop_grace_s": self.settings.preempt_grace_s,
                    **brought,
                }
            )
        )
        return run_dir

    def _hang_timeout_s(self, job: Job) -> float:
        """The job's monitoring.hang_timeout_s, or this node's default."""
        hang = (job.resolved.get("monitoring") or {}).get("hang_timeout_s")
        return float(hang or self.settings.hang_timeout_s)

    def _brought(self, job: Job) -> dict[str, Any]:
        """What the job file says of the user's code and inputs: where they are on this node."""
        code, inputs = job.resolved.get("code"), job.resolved.get("inputs") or {}
        brought: dict[str, Any] = {"inputs": local_paths(self.settings, inputs)}
        if init := job.resolved.get("init_from"):
            brought["init_from"] = for_ranks(self.settings, init)
        if code:
            brought["code_dir"] = str(bundle_dir(self.settings, code["sha256"]))
        if code and code.get("command"):  # the script's libraries are told (script_environment)
            brought["hardware"] = script_hardware(
                job.resolved["precision"],
                accelerator=self.capacity.accelerator,
                native_bf16=self.capacity.native_bf16,
            )
        if code and code.get("requirements"):
            env = env_dir(self.settings, code["requirements"])
            brought["python"] = str(env_python(env))
        return brought

    def _code_ready(self, request: LaunchRequest) -> bool:
        """Fetch the job's bundle and inputs (outside the claim's transaction: it may take a
        while); what cannot be fetched or unpacked fails the job, and frees the slots."""
        with session_scope() as session:
            job = session.get(Job, request.job_id)
            code = job.resolved.get("code") if job else None
            inputs = (job.resolved.get("inputs") or {}) if job else {}
        if code:
            try:
                problem = bubblewrap_problem() if self.settings.sandbox == "bubblewrap" else None
                if problem:
                    raise RuntimeError(f"this node cannot sandbox bundled code: {problem}")
                ensure_unpacked(self.settings, code["sha256"])
            except Exception as exc:  # a refused archive, a store that is down: said in words
                return self._fail_before_launch(
                    request, "bundle_error", f"code bundle {code['bundle']}: {exc}"
                )
        if code and code.get("requirements"):
            try:
                ensure_env(self.settings, code["requirements"], self._setup_output(request))
            except RequirementsError as exc:
                return self._fail_before_launch(request, "requirements_error", str(exc))
            except Exception as exc:  # pip could not run at all (a timeout, a missing venv)
                message = f"code.requirements did not install: {exc}"
                return self._fail_before_launch(request, "requirements_error", message)
        try:
            ensure_inputs(self.settings, inputs)
        except Exception as exc:
            return self._fail_before_launch(request, "input_error", str(exc))
        return True

    def _initial_checkpoint_ready(self, request: LaunchRequest) -> LaunchRequest | None:
        """The request with the `init_from` checkpoint's folder readable to its ranks, once
        fetched: only while the job has no checkpoint of its own (then that one resumes,
        whatever became of the other job's). None when it cannot be fetched: the job fails."""
        with session_scope() as session:
            job = session.get(Job, request.job_id)
            init = job.resolved.get("init_from") if job else None
            if not init or catalog.latest_checkpoint(session, request.job_id) is not None:
                return request
        try:
            ensure_initial(self.settings, init)
        except Exception as exc:  # the other job deleted, its checkpoint pruned, a bad archive
            which = f"the checkpoint of step {init['step']} of job {init['job']}"
            self._fail_before_launch(request, "init_from_error", f"init_from: {which}: {exc}")
            return None
        folder = str(local_folder(self.settings, init))
        return replace(request, input_paths=(*request.input_paths, folder))

    def _setup_output(self, request: LaunchRequest) -> Callable[[list[str]], None] | None:
        """Where a setup step's output goes as it comes: the job's logs, as rank 0's stdout
        (node 0's only: every node installs, one says how it went)."""
        if request.node_rank != 0:
            return None

        def store(lines: list[str]) -> None:
            with session_scope() as session:
                store_setup_output(session, request.job_id, request.attempt, lines)

        return store

    def _fail_before_launch(self, request: LaunchRequest, reason: str, message: str) -> bool:
        log.warning("job %s: %s", request.job_id, message)
        request.trace.failed(message)
        with session_scope() as session:
            transition(
                session,
                request.job_id,
                JobState.FAILED,
                from_states=LAUNCHED_STATES,
                attempt=request.attempt,
                reason=reason,
                message=message,
                failure_reason=message,
            )
            release_node_share(session, request.job_id, request.attempt, request.node_rank)
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
