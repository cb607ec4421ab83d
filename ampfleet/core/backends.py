"""Where a placed job runs: the compute-backend boundary.

The scheduler owns every decision about *whether and when* a job runs: admission, queue
order, priorities, fair share, quotas, preemption and why a job waits. Where it runs is a
backend's business, and a backend meets the scheduler at four points only:

1. **Capacity as nodes.** A backend mirrors what it offers into `nodes` rows, each labelled
   `backend` and `pool`, refreshed by the backend itself (their heartbeat is the backend
   answering). Placement and admission read them like any node, so a pool's capacity is
   what the cluster reports, and `/v1/nodes` shows it.
2. **Only jobs that ask.** A backend's nodes host only jobs whose `resources.selector` names
   their pool (`matches_backend`): nobody's job lands on a cluster they did not choose.
3. **A start is one outbox message.** A placement on a backend's nodes writes one message to
   the backend's queue (`backend_queue`) in the placement's transaction, instead of a start
   message per ampfleet node. The backend relays it after commit, and must be idempotent:
   the message can be relayed twice (a crash between submit and commit).
4. **Ends come back as transitions.** The backend watches what it started and turns its
   cluster's end states into the lifecycle's transitions (requeue_or_fail, end_if_stopped),
   releasing the attempt's allocations once its cluster says nothing of it runs.

A backend talks to its cluster on a thread of its own, never inside a transaction nor on the
scheduling pass's thread: a pass applies what the cluster last said and hands back what it
decided (starts, cancels), so a slow or silent cluster API delays nothing else. What a start
carries to the cluster is the settings its agents need and no credential (the agents' come
from the nodes' own configuration).

Inside the allocation the attempt runs ampfleet's own node agent for that one attempt
(`ampfleet run-attempt`), so ranks, sandbox, records, checkpoints and uploads are the same
code as on ampfleet nodes. Slurm is the one backend (scheduler/slurm/); a Kubernetes one
(a JobSet or TrainJob under Kueue per attempt) would implement the same four points.
"""

from __future__ import annotations

from collections.abc import Mapping

NODES_BACKEND = "nodes"
"""ampfleet's own worker nodes: the default, and what an unlabelled node is."""
BACKEND_LABEL = "backend"
POOL_LABEL = "pool"
_BACKEND_QUEUE_PREFIX = "backend:"
BACKEND_START = "ampfleet.backend_start"
"""The task name of a backend's start message (never sent to Celery)."""


def backend_queue(backend: str, pool: str) -> str:
    """The outbox queue of a backend's pool: never a Celery queue (the relay skips it)."""
    return f"{_BACKEND_QUEUE_PREFIX}{backend}:{pool}"


def is_backend_queue(queue: str) -> bool:
    return queue.startswith(_BACKEND_QUEUE_PREFIX)


def backend_queue_prefix() -> str:
    return _BACKEND_QUEUE_PREFIX


def pool_node_id(pool: str, node: str) -> str:
    """The `nodes` row of a backend's node: its pool and the cluster's name for it."""
    return f"{pool}-{node}"


def matches_backend(node_labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """An ampfleet node hosts any job; a backend's node only jobs that name its pool."""
    if node_labels.get(BACKEND_LABEL, NODES_BACKEND) == NODES_BACKEND:
        return True
    pool = node_labels.get(POOL_LABEL)
    return pool is not None and selector.get(POOL_LABEL) == pool
