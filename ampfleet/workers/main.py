"""`ampfleet worker`: the node agent plus a Celery worker consuming this node's own queue."""

from __future__ import annotations

import logging

from ampfleet.core.settings import get_settings
from ampfleet.workers.agent import NodeAgent

log = logging.getLogger(__name__)


def say_in_the_log(msg: str, _stream: object = None) -> None:
    """What Celery's signal handlers tell the terminal ("worker: Warm shutdown", a restart,
    a SIGUSR1 stack dump), as a log record: Celery writes it straight to the process's
    stdout or stderr, past logging, where it would be the one line that is not JSON."""
    log.info("%s", msg.strip())


def run_worker() -> None:
    from celery.apps import worker as celery_worker

    from ampfleet.workers import tasks

    celery_worker.safe_say = say_in_the_log  # the handlers look it up when they run
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
