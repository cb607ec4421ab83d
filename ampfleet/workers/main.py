"""`ampfleet worker`: the node agent plus a Celery worker consuming this node's own queue."""

from __future__ import annotations

import logging

from ampfleet.core.settings import get_settings
from ampfleet.workers.agent import NodeAgent

log = logging.getLogger(__name__)


def run_worker() -> None:
    from ampfleet.workers import tasks

    settings = get_settings()
    agent = NodeAgent(settings)
    agent.start()
    tasks.bind_agent(agent)
    worker = tasks.celery_app.Worker(
        hostname=f"ampfleet@{settings.node_name}",
        queues=[settings.node_queue],
        # Threads: tasks only claim rows and hand the launch to the agent in this process.
        pool="threads",
        concurrency=4,
        without_gossip=True,
        without_mingle=True,
        without_heartbeat=True,
        loglevel="INFO",
        quiet=True,
    )
    try:
        worker.start()
    finally:
        log.info("worker stopping; requeueing attempts still running here")
        agent.stop()
