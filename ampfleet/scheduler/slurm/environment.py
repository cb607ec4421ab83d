"""What a Slurm batch job carries to its nodes, and what it never carries.

slurmctld keeps a batch job's environment in its state folder, shows it to Slurm's
administrators and hands it to every node of the job: anything in it is as good as
published. So it carries only the settings the run-attempt agent needs to behave as this
deployment does (limits, sandbox, where the store is), taken from the scheduler's settings
(from its environment and its .env alike), and no credential: the database and broker URLs,
the store's keys, the API's secret key and slurmrestd's token stay out. The agents get
their credentials from a file the operator keeps on each compute node
(`AMPFLEET_SLURM_NODE_SETTINGS_FILE`, which `ampfleet run-attempt --settings-file` reads).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ampfleet.core.settings import Settings

AGENT_SETTINGS = (
    "log_format",
    "log_level",
    "data_dir",
    "broker_key_prefix",
    "broker_visibility_timeout_s",
    "db_pool_size",
    "db_pool_max_overflow",
    "db_pool_timeout_s",
    "heartbeat_interval_s",
    "start_timeout_s",
    "cancel_grace_s",
    "hang_timeout_s",
    "cordon_after_hangs",
    "hang_window_s",
    "preempt_grace_s",
    "max_metric_points_per_job",
    "max_log_bytes_per_job",
    "max_log_line_bytes",
    "metrics_flush_s",
    "telemetry_interval_s",
    "artifact_url",
    "s3_endpoint_url",
    "s3_region",
    "rank_launcher",
    "sandbox",
    "pip_args",
    "data_roots",
    "max_archive_files",
    "max_archive_unpacked_bytes",
    "sandbox_max_tasks",
    "sandbox_max_open_files",
    "sandbox_first_uid",
    "sandbox_uid_count",
    "sandbox_tmp_mb",
    "sandbox_max_disk_mb",
    "checkpoint_upload_timeout_s",
    "max_artifact_bytes",
)
"""The settings a batch job carries when the scheduler has them set: what the agent reads
(workers/, core/) and that grants nothing. `environment` is not among them: a node's agent
never uses the secret key that a production setting would demand of it."""

PASSED_VARIABLES = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ", "HOME", "SLURM_CONF")
"""Of the scheduler's own environment: what the agent's interpreter and Slurm's commands
need to run the same way on the node."""


def batch_environment(settings: Settings, process: Mapping[str, str]) -> dict[str, str]:
    """The environment of a batch job of `settings`' pool; `process`: the scheduler's."""
    environment = {k: v for k, v in process.items() if k in PASSED_VARIABLES}
    for name in AGENT_SETTINGS:
        if name in settings.model_fields_set:
            environment[f"AMPFLEET_{name.upper()}"] = _encoded(getattr(settings, name))
    environment.update(settings.slurm_environment)
    return environment


def _encoded(value: Any) -> str:
    """As pydantic-settings reads it back: JSON for lists and mappings, paths absolute (the
    scheduler's relative data dir means nothing in the job's working directory)."""
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
