"""How ampfleet's things are named on the Slurm side, and read back.

The job name carries the job and attempt: it is the key a submit is looked up by (so a
restarted scheduler never submits an attempt twice) and how the watcher finds the attempt a
Slurm job runs. A pool's nodes are named after the pool and the Slurm node.
"""

from __future__ import annotations

from ampfleet.core.backends import pool_node_id

BACKEND = "slurm"
JOB_NAME_PREFIX = "ampfleet-"


def slurm_job_name(job_id: str, attempt: int) -> str:
    return f"{JOB_NAME_PREFIX}{job_id}-{attempt}"


def parse_job_name(name: str) -> tuple[str, int] | None:
    """(job id, attempt) of a Slurm job ampfleet submitted; None for anyone else's."""
    if not name.startswith(JOB_NAME_PREFIX):
        return None
    job_id, _, attempt = name.removeprefix(JOB_NAME_PREFIX).rpartition("-")
    return (job_id, int(attempt)) if job_id and attempt.isdigit() else None


node_id = pool_node_id
"""The `nodes` row of a Slurm node of a pool."""
