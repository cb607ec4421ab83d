"""Where a multi-node attempt's other nodes wait for its first node's rendezvous endpoint.

The first node publishes host:port on its allocation when it claims it; the others cannot
launch torchrun before they know it. That wait can last as long as the first node's start
message takes, so it happens here, on one thread of the node agent's own, and never on a
Celery thread: a node whose worker threads all waited would accept no other start message.
One query per pass covers every waiting attempt.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlalchemy import select, tuple_

from ampfleet.core.allocations import release_node_share
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import requeue_or_fail
from ampfleet.core.models import Allocation, Job
from ampfleet.core.states import ACTIVE_STATES, JobState
from ampfleet.workers.attempts import LaunchRequest

log = logging.getLogger(__name__)
POLL_S = 0.2


@dataclass
class _Waiting:
    request: LaunchRequest
    deadline: float


class RendezvousWaiter:
    """Holds launch requests until their endpoint is known, then hands them to `launch`."""

    def __init__(self, launch: Callable[[LaunchRequest], None], wait_s: float) -> None:
        self._launch = launch
        self._wait_s = wait_s
        self._incoming: queue.Queue[LaunchRequest] = queue.Queue()
        self._waiting: dict[tuple[str, int], _Waiting] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rendezvous", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def wait_for(self, request: LaunchRequest) -> None:
        """Called from a Celery thread: returns at once."""
        self._incoming.put(request)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            while True:
                try:
                    request = self._incoming.get_nowait()
                except queue.Empty:
                    break
                key = (request.job_id, request.attempt)
                self._waiting[key] = _Waiting(request, time.monotonic() + self._wait_s)
            if not self._waiting:
                continue
            try:
                self._pass()
            except Exception:  # the database is away: the deadlines still bound the wait
                log.warning("rendezvous pass failed; retrying", exc_info=True)

    def _pass(self) -> None:
        """Decide in one transaction; act (launch, forget) only once it has committed."""
        launch: list[LaunchRequest] = []
        done: list[tuple[str, int]] = []
        with session_scope() as session:
            rows = session.execute(
                select(
                    Allocation.job_id,
                    Allocation.attempt,
                    Allocation.rendezvous,
                    Job.state,
                    Job.attempt.label("current_attempt"),
                )
                .join(Job, Job.id == Allocation.job_id)
                .where(
                    tuple_(Allocation.job_id, Allocation.attempt).in_(list(self._waiting)),
                    Allocation.node_rank == 0,
                )
            ).all()
            first_nodes = {(r.job_id, r.attempt): r for r in rows}
            now = time.monotonic()
            for key, waiting in self._waiting.items():
                request = waiting.request
                row = first_nodes.get(key)
                if (
                    row is None
                    or row.current_attempt != request.attempt
                    or JobState(row.state) not in ACTIVE_STATES
                ):
                    # The attempt is over, or being stopped: nothing was launched here,
                    # and nothing need be.
                    release_node_share(session, *key, request.node_rank)
                    request.trace.not_launched("the attempt ended before its rendezvous")
                elif row.rendezvous:
                    launch.append(replace(request, rendezvous=row.rendezvous))
                elif now >= waiting.deadline:
                    never = "the first node of the job never published its rendezvous endpoint"
                    requeue_or_fail(
                        session,
                        request.job_id,
                        request.attempt,
                        reason="rendezvous_timeout",
                        message=never,
                    )
                    release_node_share(session, *key, request.node_rank)
                    request.trace.failed(never)
                else:
                    continue
                done.append(key)
        for key in done:
            del self._waiting[key]
        for request in launch:
            self._launch(request)
