"""The Celery app for Celery's own tools: `celery -A ampfleet.core.celery_monitoring inspect
ping`, `... events`, Flower. It is the fleet's configuration (celery_config.py) and nothing
more, so a monitoring host needs only `ampfleet[broker]`: the worker's app would import the
node agent and torch with it, which takes a Flower host the worker's packages and each
`celery inspect` tens of seconds before it says a word.

It registers no task: a monitor only watches, and the workers hold the tasks."""

from __future__ import annotations

from ampfleet.core.celery_config import make_celery
from ampfleet.core.settings import get_settings

app = make_celery(get_settings())
