"""Process-wide logging setup: one line per record, naming the process role."""

from __future__ import annotations

import logging
import sys


def configure_logging(role: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s {role:<9} %(levelname)-7s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("celery.worker.consumer", "celery.apps.worker", "amqp"):
        logging.getLogger(noisy).setLevel("WARNING")
    # kombu warns on every embedded-broker connection that it has no host name.
    logging.getLogger("kombu").setLevel("ERROR")
