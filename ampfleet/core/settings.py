"""One typed settings object, read once per process from AMPFLEET_* variables (or .env)."""

from __future__ import annotations

import os
import socket
import stat
from functools import lru_cache
from pathlib import Path
from typing import Literal

from dotenv import dotenv_values
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_SECRET = "development-only-secret"  # noqa: S105 - refused outside development


# `ampfleet up` leaves the first admin key in this file of the data folder.
ADMIN_KEY_FILE_NAME = "admin.key"
# A key prefix ending in one of these is already separated from what follows.
KEY_SEPARATORS = (":", ".", "_", "-", "/")


CREDENTIAL_SETTINGS = frozenset(
    {
        "database_url",
        "broker_url",
        "secret_key",
        "s3_access_key_id",
        "s3_secret_access_key",
        "slurm_token",
    }
)
"""Settings that grant access to something: never written where others may read them (a Slurm
job's environment, an event, a log line)."""
CREDENTIAL_VARIABLES = frozenset(f"AMPFLEET_{name.upper()}" for name in CREDENTIAL_SETTINGS)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AMPFLEET_", env_file=".env", extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    log_format: Literal["json", "text"] = Field("json", description="Process log lines.")
    log_level: str = "INFO"
    data_dir: Path = Field(Path("var"), description="Embedded database, broker files, runs, logs.")
    database_url: str = Field(
        "", description="SQLAlchemy URL; empty means a SQLite file in data_dir."
    )
    broker_url: str = Field("", description="Celery broker URL; empty means files in data_dir.")
    broker_key_prefix: str = Field(
        "",
        max_length=64,
        description="Redis: prefix of every key the platform writes (broker and rate limits), "
        "joined with ':' unless it ends in one of ':._-/'.",
    )
    celery_monitoring: bool = Field(
        False,
        description="Workers answer remote control (celery inspect, Flower) and send task "
        "events; off: it costs broker traffic per task and per worker.",
    )
    broker_visibility_timeout_s: int = Field(
        300, ge=1, description="Redis: an unacknowledged message is delivered again after this."
    )
    secret_key: str = DEFAULT_SECRET

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_keepalive_s: int = Field(
        75,
        ge=1,
        le=3600,
        description="How long the API keeps an idle connection open. Longer than what "
        "clients and load balancers keep one idle (httpx 5 s, most balancers 60 s): a server "
        "that closes first races the client's next request on it, which then fails with "
        "'Server disconnected without sending a response'.",
    )
    max_body_bytes: int = Field(1 << 20, gt=0, description="Larger request bodies get 413.")
    # At most 200: pydantic refuses to serialise values nested past about 255 levels.
    max_json_depth: int = Field(
        64, ge=2, le=200, description="Request bodies nested deeper (arrays, objects) get 422."
    )
    stream_poll_s: float = Field(0.5, gt=0, description="How often live streams look for news.")
    rate_limit_per_s: float = Field(50.0, gt=0, description="Requests per second per key.")
    key_cache_ttl_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="How long an API process remembers a key that verified (0: never); a key "
        "revoked through another API process works there for at most this long.",
    )
    rate_limit_burst: float = Field(200.0, ge=1, description="Requests a key may burst.")
    console_login_ttl_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How long a one-time console login token (`ampfleet ui`) may be used.",
    )
    console_session_ttl_s: float = Field(
        12 * 3600.0,
        gt=0,
        le=7 * 86400,
        description="How long a console session opened with a login token lasts.",
    )
    auth_failure_rate_per_s: float = Field(
        1.0, gt=0, description="Requests with a wrong key per second per client address."
    )
    auth_failure_burst: float = Field(
        50.0, ge=1, description="Requests with a wrong key a client address may burst."
    )
    max_streams_per_key: int = Field(
        20, ge=1, description="Live streams a key may hold open on one API process; 429 past it."
    )
    # A fifth of the threadpool's 40 threads and under a third of the default pool's 30
    # connections: what one key can hold however many requests it sends at once.
    max_requests_in_flight_per_key: int = Field(
        8, ge=1, description="Requests a key may have in flight on one API process; 429 past it."
    )
    # Every per-key limit above is multiplied by the keys a project holds: a write key
    # must not be able to mint them without end.
    max_keys_per_project: int = Field(
        50,
        ge=1,
        description="Active (unrevoked) API keys a project may hold; POST /v1/keys past it "
        "gets 409 until one is revoked.",
    )
    stream_key_recheck_s: float = Field(
        10.0, gt=0, description="How often a live stream re-checks its key; a revoked one ends."
    )
    db_pool_size: int = Field(10, ge=1, description="Database connections a process keeps.")
    db_pool_max_overflow: int = Field(20, ge=0, description="Extra connections under load.")
    db_pool_timeout_s: float = Field(
        3.0, gt=0, description="Wait for a free connection; past it a request gets 503."
    )

    node_name: str = Field(default_factory=socket.gethostname)
    node_address: str = Field("127.0.0.1", description="Address other nodes use for rendezvous.")
    node_cpu_slots: int = Field(2, ge=1, description="Rank slots on a node without GPUs.")
    node_memory_mb: int | None = Field(
        None,
        ge=64,
        description="Memory the node offers its ranks (each slot a share); unset: detected, "
        "RAM or its cgroup limit on CPU nodes, GPU memory on GPU nodes.",
    )
    node_labels: dict[str, str] = Field(default_factory=dict)
    heartbeat_interval_s: float = Field(2.0, gt=0)
    node_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A node silent this long is dead, counted while the scheduler can reach "
        "the database (after an outage, from its end).",
    )

    fair_share_window_s: float = Field(
        3600.0, gt=0, description="GPU-seconds used within it decide fair-share order."
    )
    goodput_window_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="A project's goodput (API and /metrics) counts its jobs submitted within it.",
    )
    webhook_allow_private: bool = Field(
        False, description="Allow webhook targets on loopback or private networks."
    )
    webhook_timeout_s: float = Field(5.0, gt=0)
    webhook_max_attempts: int = Field(8, ge=1)
    webhook_retry_base_s: float = Field(5.0, gt=0, description="First retry delay; doubles.")
    webhook_poll_s: float = Field(1.0, gt=0)
    idempotency_key_ttl_s: float = Field(
        86400.0, gt=0, description="How long an Idempotency-Key of POST /v1/jobs is remembered."
    )
    webhook_secret_overlap_s: float = Field(
        86400.0, ge=0, description="After a rotation, how long the old secret also signs."
    )
    scheduler_poll_s: float = Field(2.0, gt=0, description="Pass interval when nobody wakes it.")
    start_timeout_s: float = Field(
        120.0, gt=0, description="SCHEDULED/STARTING longer is requeued."
    )
    cancel_grace_s: float = Field(5.0, ge=0, description="SIGTERM to SIGKILL delay on cancel.")
    hang_timeout_s: float = Field(
        600.0,
        gt=0,
        description="A running job none of whose ranks moves to another phase of its step "
        "this long is hung: its stacks are dumped and it restarts (a job's "
        "monitoring.hang_timeout_s overrides it).",
    )
    cordon_after_hangs: int = Field(
        3, ge=0, description="A node where this many attempts hung is cordoned; 0: never."
    )
    hang_window_s: float = Field(
        3600.0, gt=0, description="How far back the hangs that cordon a node are counted."
    )
    preempt_grace_s: float = Field(
        120.0, ge=0, description="How long preempted ranks get to checkpoint before SIGKILL."
    )
    max_metric_points_per_job: int = Field(5_000_000, ge=1)
    max_log_bytes_per_job: int = Field(200 << 20, ge=1)
    max_log_line_bytes: int = Field(8192, ge=80, description="Longer lines are cut.")
    metrics_flush_s: float = Field(0.5, gt=0, description="How often ranks' metrics reach the DB.")
    telemetry_interval_s: float = Field(
        10.0, gt=0, description="How often the node agent samples each rank's CPU, memory, GPU."
    )

    metrics_require_key: bool = Field(
        False, description="GET /metrics needs an admin key (else it is open, like /healthz)."
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins allowed to call the API; none by default.",
    )

    # The artifact store (checkpoints, models): only the API and node agents hold these;
    # ranks never see them.
    artifact_url: str = Field(
        "",
        description="s3://bucket/prefix, or file:///folder; empty means data_dir/artifacts.",
    )
    s3_endpoint_url: str = Field("", description="S3-compatible server; empty means AWS.")
    s3_access_key_id: str = ""
    s3_secret_access_key: SecretStr = SecretStr("")
    s3_region: str = "us-east-1"
    max_bundle_bytes: int = Field(
        100 << 20, gt=0, description="Largest code bundle archive; larger uploads get 413."
    )
    max_archive_files: int = Field(
        10_000, ge=1, description="Entries an uploaded archive may hold; more get 422."
    )
    max_bundle_source_bytes: int = Field(
        16 << 20,
        gt=0,
        description="Bytes of Python source (.py files) a bundle may hold: the API compiles "
        "each on upload; more get 422 (vendored packages belong in code.requirements).",
    )
    rank_launcher: Literal["warm", "local", "torchrun"] = Field(
        "warm",
        description="How a single-node attempt of a recipe (installed or bundled) starts its "
        "ranks: 'warm' forks them from a launcher that imported torch and the training stack "
        "ahead of the attempt (one kept ready per node, in a warm sandbox for bundled code: "
        "AMPFLEET_WARM_SANDBOX; cold as 'local' when none is); 'local' spawns fresh "
        "interpreters without torchrun (in the attempt's sandbox for bundled code); "
        "'torchrun' as every other attempt (scripts, code.requirements, several nodes) "
        "always does.",
    )
    warm_sandbox: Literal["once_used", "always", "never"] = Field(
        "once_used",
        description="Whether a node keeps a warm sandbox for bundled code (with "
        "AMPFLEET_RANK_LAUNCHER=warm, a root worker and Linux 5.12 or later): a complete "
        "sandbox with a launcher that imported torch and the training stack, made before its "
        "attempt, which then gets the attempt's folders and limits. 'once_used' from the "
        "first bundled attempt the node runs (a node that runs none holds no second warm "
        "interpreter), 'always' from its start, 'never'.",
    )
    sandbox: Literal["bubblewrap", "none"] = Field(
        "bubblewrap",
        description="What contains ranks that run bundled code (where bwrap cannot run, "
        "bundled code is refused at submit); 'none' runs it unconfined, for trusted users.",
    )
    pip_args: str = Field(
        "",
        description="Options for pip when it installs a job's code.requirements, e.g. "
        "'--index-url https://pypi.internal/simple' or '--no-index --find-links /wheels'; "
        "always wheels only (--only-binary=:all: comes after these): nothing is built from "
        "source on a node.",
    )
    max_dataset_bytes: int = Field(
        2 << 30, gt=0, description="Largest dataset upload (archive or file); larger get 413."
    )
    data_roots: list[Path] = Field(
        default_factory=list,
        description="Shared-filesystem folders a spec's inputs may name as file:///... (a "
        'JSON list, e.g. ["/mnt/datasets"]); none by default. Mounted alike on every node.',
    )
    sandbox_max_tasks: int = Field(
        4096,
        ge=64,
        description="Processes and threads an attempt running bundled code may have on a node "
        "(a pids cgroup where the agent can make one, else RLIMIT_NPROC).",
    )
    sandbox_max_open_files: int = Field(
        16384, ge=256, description="Open files of each sandboxed process (RLIMIT_NOFILE)."
    )
    sandbox_first_uid: int = Field(
        200_000,
        ge=1000,
        description="Where a root worker runs sandboxed processes: host uids from this one on "
        "(pip's installs get the first, each attempt on a node one of its own after it); "
        "none of them may belong to a real user or service, and workers sharing a network "
        "namespace need ranges of their own (the egress filter matches these uids).",
    )
    sandbox_uid_count: int = Field(
        1024,
        ge=2,
        description="How many uids from AMPFLEET_SANDBOX_FIRST_UID on are the sandbox's.",
    )
    sandbox_tmp_mb: int = Field(
        1024, ge=16, description="Size of a sandbox's RAM-backed /tmp (it counts as memory too)."
    )
    sandbox_max_disk_mb: int = Field(
        50 * 1024,
        ge=64,
        description="Bytes an attempt's run and checkpoint folders may hold on a node; past it "
        "the attempt fails with an event saying so (no single file grows past it either).",
    )
    max_archive_unpacked_bytes: int = Field(
        1 << 30, gt=0, description="Bytes an uploaded archive may unpack to; more get 422."
    )
    checkpoint_upload_timeout_s: float = Field(
        600.0, gt=0, description="How long an attempt's outcome waits for its uploads."
    )
    max_artifact_bytes: int = Field(
        64 << 30,
        gt=0,
        description="Largest file or checkpoint a job's ranks may hand over for upload; "
        "larger are refused with an event.",
    )

    # A Slurm cluster as one pool of nodes (scheduler/slurm/backend.py); unset: none.
    slurm_pool: str = Field(
        "",
        max_length=48,
        pattern=r"^([a-z0-9][a-z0-9-]*)?$",
        description="Name of the Slurm pool; jobs run there when resources.selector names it "
        "(pool: NAME). Empty: no Slurm backend.",
    )
    slurm_url: str = Field(
        "", description="slurmrestd: unix:/path/to/socket or http(s)://host:port."
    )
    slurm_user: str | None = Field(None, description="JWT auth: the user the token is for.")
    slurm_token: SecretStr | None = Field(
        None, description="JWT auth: the token (scontrol token); unset: local auth."
    )
    slurm_token_file: Path | None = Field(
        None,
        description="JWT auth: a file holding the token, read again for every call, so that "
        "the operator rotates it by replacing the file; wins over AMPFLEET_SLURM_TOKEN.",
    )
    slurm_partition: str | None = Field(None, description="Partition the jobs go to.")
    slurm_account: str | None = Field(None, description="Account charged, if the site has any.")
    slurm_qos: str | None = Field(None, description="QoS of the jobs, if the site has any.")
    slurm_cpus_per_slot: int = Field(1, ge=1, description="CPUs of one rank slot.")
    slurm_gpus_per_slot: int = Field(
        0, ge=0, description="GPUs of one rank slot; 0: the pool's slots are CPU slots."
    )
    slurm_python: str = Field(
        "",
        description="The interpreter ampfleet is installed in on the compute nodes; "
        "empty: the scheduler's own (the same path on every node).",
    )
    slurm_time_margin_s: int = Field(
        300,
        ge=0,
        description="Slurm's time limit is the job's max_runtime_s plus this, so that "
        "ampfleet's own limit (with its checkpoint and reason) comes first.",
    )
    slurm_environment: dict[str, str] = Field(
        default_factory=dict,
        description="Variables the batch jobs get besides the settings ampfleet passes "
        "(scheduler/slurm/environment.py); never a credential: Slurm stores and shows them.",
    )
    slurm_node_settings_file: str = Field(
        "",
        description="A file on every compute node, of AMPFLEET_* lines, mode 0600, owned by "
        "the user the jobs run as: the credentials the agents need there (database and "
        "broker URLs, the store's keys), which the batch jobs never carry. Empty: none.",
    )
    slurm_output_dir: str = Field(
        "",
        description="A folder on every compute node, writable by the user the jobs run as, "
        "where each batch job's output (its agents' log) goes as <Slurm job name>-<id>.out; "
        "empty: discarded.",
    )

    @field_validator("artifact_url")
    @classmethod
    def _known_artifact_url(cls, url: str) -> str:
        if url.startswith("s3://"):
            if not url.removeprefix("s3://").split("/", 1)[0]:
                raise ValueError("AMPFLEET_ARTIFACT_URL s3://bucket/prefix needs a bucket")
        elif url and not url.startswith("file:///"):
            raise ValueError("AMPFLEET_ARTIFACT_URL must be s3://bucket/prefix or file:///folder")
        return url

    @model_validator(mode="after")
    def _refuse_default_secret_outside_development(self) -> Settings:
        if self.environment != "development" and self.secret_key == DEFAULT_SECRET:
            raise ValueError(
                f"AMPFLEET_SECRET_KEY must be set when AMPFLEET_ENVIRONMENT={self.environment}"
            )
        if self.environment != "development" and len(self.secret_key) < 16:
            raise ValueError("AMPFLEET_SECRET_KEY must be at least 16 characters")
        if self.slurm_pool and not self.slurm_url:
            raise ValueError("AMPFLEET_SLURM_POOL needs AMPFLEET_SLURM_URL (slurmrestd)")
        if carried := sorted(set(self.slurm_environment) & CREDENTIAL_VARIABLES):
            raise ValueError(
                f"AMPFLEET_SLURM_ENVIRONMENT may not carry {', '.join(carried)}: Slurm stores "
                "and shows a job's environment; put credentials in the nodes' settings file "
                "(AMPFLEET_SLURM_NODE_SETTINGS_FILE)"
            )
        return self

    @property
    def effective_database_url(self) -> str:
        return self.database_url or embedded_database_url(self.data_dir)

    @property
    def redis_key_prefix(self) -> str:
        """What every Redis key starts with: the configured prefix and its separator."""
        prefix = self.broker_key_prefix
        return prefix if not prefix or prefix.endswith(KEY_SEPARATORS) else f"{prefix}:"

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def broker_folder(self) -> Path:
        return self.data_dir.resolve() / "broker"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir.resolve() / "runs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_dir.resolve() / "checkpoints"

    @property
    def staging_dir(self) -> Path:
        """The node agent's own scratch space (checkpoint archives on their way up): never
        in a folder the ranks can write."""
        return self.data_dir.resolve() / "staging"

    @property
    def node_queue(self) -> str:
        return node_queue(self.node_name)


def node_queue(node_name: str) -> str:
    return f"node.{node_name}"


SCHEDULER_QUEUE = "scheduler"


EMBEDDED_DATABASE_FILE = "ampfleet.db"


def embedded_database_url(data_dir: Path) -> str:
    """The embedded default's database: SQLite in the data dir."""
    return f"sqlite:///{data_dir.resolve() / EMBEDDED_DATABASE_FILE}"


@lru_cache
def get_settings() -> Settings:
    return Settings()


class SettingsFileError(ValueError):
    """A settings file that cannot be used: missing, unreadable, or open to other users."""


def load_settings_file(path: Path) -> Settings:
    """This process's settings with the AMPFLEET_* lines of `path` over its environment: how
    a node that runs no ampfleet service (a Slurm compute node) gets the credentials its
    agent needs, which must not travel with the job. The file holds credentials, so one
    that anybody but its owner may read or write is refused, as ssh refuses such a key."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise SettingsFileError(f"{path} is not a regular file")
        if mode & 0o077:
            raise SettingsFileError(
                f"{path} is open to others than its owner (mode {stat.S_IMODE(mode):04o}); "
                f"it holds credentials: chmod 600 {path}"
            )
        values = dotenv_values(path)
    except OSError as error:
        raise SettingsFileError(f"cannot read the settings file {path}: {error}") from None
    os.environ.update(
        {k: v for k, v in values.items() if k.startswith("AMPFLEET_") and v is not None}
    )
    get_settings.cache_clear()
    return get_settings()
