"""Celery tasks of a worker node. Arguments are row ids; the database holds the truth."""

from __future__ import annotations

from ampfleet.core.messaging import START_ATTEMPT, get_celery
from ampfleet.workers.agent import NodeAgent

celery_app = get_celery()
_agent: NodeAgent | None = None


def bind_agent(agent: NodeAgent) -> None:
    global _agent  # noqa: PLW0603 - one agent per worker process, set once at start
    _agent = agent


@celery_app.task(name=START_ATTEMPT, acks_late=True, ignore_result=True)
def start_attempt(job_id: str, attempt: int, node_rank: int) -> None:
    """Claim this node's allocation of the attempt and launch its ranks; returns at once."""
    if _agent is None:
        raise RuntimeError("start_attempt ran outside an ampfleet worker")
    _agent.handle_start(job_id, attempt, node_rank)
