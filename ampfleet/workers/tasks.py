"""Celery tasks of a worker node. Arguments are row ids; the database holds the truth.

A start message whose claim meets a database that is briefly away (a restart, a failover,
a dropped connection) is retried with backoff rather than dropped: dropping it would leave
the job waiting for the reaper's start timeout and charge it a restart. Retrying is safe
because the claim is one conditional UPDATE that commits or changes nothing. Any other
error is a bug or bad data, and retrying it would only repeat it.
"""

from __future__ import annotations

import logging

from celery import Task

from ampfleet.core.celery_config import START_ATTEMPT
from ampfleet.core.db import database_unavailable
from ampfleet.core.messaging import get_celery
from ampfleet.workers.agent import NodeAgent

log = logging.getLogger(__name__)
celery_app = get_celery()
_agent: NodeAgent | None = None

START_RETRIES = 6
START_RETRY_MAX_DELAY_S = 30.0


def bind_agent(agent: NodeAgent) -> None:
    global _agent  # noqa: PLW0603 - one agent per worker process, set once at start
    _agent = agent


def retry_delay_s(retries: int) -> float:
    """1, 2, 4 ... seconds, at most START_RETRY_MAX_DELAY_S: about a minute in all."""
    return min(2.0**retries, START_RETRY_MAX_DELAY_S)


@celery_app.task(
    bind=True,
    name=START_ATTEMPT,
    acks_late=True,
    ignore_result=True,
    max_retries=START_RETRIES,
)
def start_attempt(
    self: Task,
    job_id: str,
    attempt: int,
    node_rank: int,
    trace_context: dict[str, str] | None = None,
) -> None:
    """Claim this node's allocation of the attempt and launch its ranks; returns at once.
    `trace_context`: the placement's span, which the launch continues (core/tracing.py)."""
    if _agent is None:
        raise RuntimeError("start_attempt ran outside an ampfleet worker")
    try:
        _agent.handle_start(job_id, attempt, node_rank, trace_context)
    except Exception as error:
        if not database_unavailable(error):
            raise
        retries = self.request.retries
        log.warning(
            "start of %s attempt %s: database unavailable (%s); retry %d of %d",
            job_id,
            attempt,
            type(error).__name__,
            retries + 1,
            START_RETRIES,
        )
        raise self.retry(exc=error, countdown=retry_delay_s(retries)) from error
