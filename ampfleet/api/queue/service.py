"""Rules of the queue resource: the scheduler's order and its page cursor.

The order is the scheduler's own `queue_key` (priority class, then weighted fair share, then
FIFO) over the usage and weights the scheduler reads, so the listing and a pass agree.
Jobs in restart backoff come after the others, as in the positions a pass writes: a pass
considers them only once their backoff is over.
"""

from __future__ import annotations

import bisect
import json
import math
from datetime import datetime

from sqlalchemy.orm import Session

from ampfleet.api.auth import ProjectScope
from ampfleet.api.pagination import decode_cursor, encode_cursor
from ampfleet.api.queue import repository
from ampfleet.api.queue.repository import QueuedJob
from ampfleet.api.queue.schemas import QueueEntry, QueuePage
from ampfleet.core.fairshare import queue_key
from ampfleet.core.fleet import JobRequest
from ampfleet.core.models import Job
from ampfleet.core.settings import get_settings
from ampfleet.core.spec import Priority

OrderKey = tuple[int, int, float, str]
"""(backing off, then the scheduler's queue_key: -priority, weighted share, id)."""


def in_order(session: Session, now: datetime) -> list[tuple[OrderKey, QueuedJob]]:
    """Every queued job with its key, first to be considered first."""
    usage = repository.usage_by_project(session, get_settings().fair_share_window_s)
    policies = repository.project_policies(session)
    keyed = []
    for job in repository.queued_jobs(session):
        # Ordering reads only id, project and priority; the shape is the gang as a total.
        request = JobRequest(
            id=job.id,
            project=job.project,
            priority=job.priority,
            nodes=None,
            procs_per_node=None,
            total_procs=job.gang_size,
        )
        backing_off = job.not_before is not None and job.not_before > now
        keyed.append(((int(backing_off), *queue_key(request, usage, policies)), job))
    keyed.sort(key=lambda item: item[0])
    return keyed


def page(
    session: Session,
    scope: ProjectScope,
    *,
    cursor: str | None,
    limit: int,
    now: datetime,
) -> QueuePage:
    after = decode_cursor(cursor, _order_key) if cursor else None
    # Positions count every project's jobs, so the order is built over all of them first.
    visible = [
        (position, key, job)
        for position, (key, job) in enumerate(in_order(session, now), start=1)
        if scope.admits(job.project)
    ]
    start = _start_after(after, [key for _, key, _ in visible]) if after else 0
    chosen = visible[start : start + limit]
    rows = repository.jobs_by_id(session, [job.id for _, _, job in chosen])
    items = [_entry(position, rows[job.id]) for position, _, job in chosen if job.id in rows]
    more = start + limit < len(visible)
    return QueuePage(
        items=items,
        total=len(visible),
        next_cursor=_cursor_of(chosen[-1][1]) if more and chosen else None,
    )


def _start_after(after: OrderKey, keys: list[OrderKey]) -> int:
    """Right after the cursor's job while it is still queued, whatever its project's share
    has drifted to since; once it left the queue, after where its key would sort."""
    for index, key in enumerate(keys):
        if key[3] == after[3]:
            return index + 1
    return bisect.bisect_right(keys, after)


def _entry(position: int, job: Job) -> QueueEntry:
    return QueueEntry(
        position=position,
        id=job.id,
        name=job.name,
        project=job.project,
        priority=Priority(job.resolved["priority"]),
        gang_size=job.gang_size,
        pending_reason=job.pending_reason,
        estimated_start_at=job.estimated_start_at,
        not_before=job.not_before,
        created_at=job.created_at,
    )


def _cursor_of(key: OrderKey) -> str:
    return encode_cursor(json.dumps(list(key), separators=(",", ":")).encode())


def _order_key(payload: bytes) -> OrderKey | None:
    value = json.loads(payload)
    if (
        isinstance(value, list)
        and len(value) == 4
        and value[0] in (0, 1)
        and type(value[1]) is int
        and type(value[2]) in (int, float)
        and math.isfinite(value[2])
        and isinstance(value[3], str)
        and value[3].startswith("job_")
    ):
        return int(value[0]), value[1], float(value[2]), value[3]
    return None
