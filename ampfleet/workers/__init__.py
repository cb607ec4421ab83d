"""Worker node: the Celery worker on the node's own queue, the node agent, and training."""
