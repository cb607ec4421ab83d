"""ORM models: the database is the single source of truth for jobs, nodes, allocations, metrics."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ampfleet.core.project_names import PROJECT_NAME_MAX_LENGTH

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, _dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, _dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("project", "idempotency_key", name="uq_jobs_project_idempotency_key"),
        Index("ix_jobs_state_priority", "state", "priority"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH), index=True)
    name: Mapped[str | None] = mapped_column(String(128))
    recipe: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(comment="the job spec exactly as submitted")
    resolved: Mapped[dict[str, Any]] = mapped_column(comment="the spec with every default filled")
    idempotency_key: Mapped[str | None] = mapped_column(String(128))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    trace_context: Mapped[dict[str, Any] | None] = mapped_column(
        comment="W3C trace context of its submit (core/tracing.py); null: not traced"
    )

    state: Mapped[str] = mapped_column(String(16), index=True)
    priority: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    gang_size: Mapped[int] = mapped_column(Integer, comment="total rank slots it needs")

    step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int | None] = mapped_column(Integer)
    latest_metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    precision: Mapped[str | None] = mapped_column(String(8), comment="effective, at run time")
    allreduce_dtype: Mapped[str | None] = mapped_column(String(8))
    failure_reason: Mapped[str | None] = mapped_column(Text)

    # The scheduler's explanation while the job waits (written each pass when it changes).
    pending_reason: Mapped[str | None] = mapped_column(Text)
    queue_position: Mapped[int | None] = mapped_column(Integer)
    estimated_start_at: Mapped[datetime | None] = mapped_column()
    not_before: Mapped[datetime | None] = mapped_column(comment="restart backoff")

    # Volume accounting: past the configured limits, more is dropped and counted.
    metric_points: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    metric_points_dropped: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    log_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    log_lines_dropped: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    records_rejected: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0", comment="rank 0's records the agent refused"
    )

    sweep_id: Mapped[str | None] = mapped_column(
        String(40), index=True, comment="the sweep it is a trial of; null: a plain job"
    )
    trial: Mapped[int | None] = mapped_column(Integer, comment="its trial number in the sweep")

    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    scheduled_at: Mapped[datetime | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()


class Project(Base):
    """Scheduling policy of a project (tenant); a project without a row gets the defaults."""

    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0, comment="fair-share weight")
    max_slots: Mapped[int | None] = mapped_column(Integer, comment="concurrent GPUs/slots")
    max_queued_jobs: Mapped[int | None] = mapped_column(Integer)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer, comment="placed at once")
    allow_custom_code: Mapped[bool | None] = mapped_column(
        Boolean, comment="bundles may be uploaded and run; null: only in project 'default'"
    )
    idle_policy: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, comment="{below_percent, window_s, action}: jobs that idle get told or stopped"
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ApiKey(Base):
    """A project's API key. Only a keyed hash of the secret is stored; the key itself is
    shown once, when it is created."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    prefix: Mapped[str] = mapped_column(String(16), unique=True, comment="public lookup part")
    secret_hash: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH), index=True)
    role: Mapped[str] = mapped_column(String(8), comment="admin | write | read")
    name: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column()


class ConsoleLoginToken(Base):
    """A one-time login token for the console (`ampfleet ui`): only its keyed hash is kept.
    It opens one console session, for the key that asked for it, before `expires_at`; the
    row stays a while after, so a late or second use is told apart from a wrong token."""

    __tablename__ = "console_login_tokens"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    used_at: Mapped[datetime | None] = mapped_column(comment="null: not exchanged yet")


class JobEvent(Base):
    """Every state transition (and notable happening) of a job, in order."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(16), comment="transition | info")
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str | None] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text, default="")


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    queue: Mapped[str] = mapped_column(String(160))
    address: Mapped[str] = mapped_column(String(255))
    accelerator: Mapped[str] = mapped_column(String(8), comment="cuda | cpu")
    slots: Mapped[int] = mapped_column(Integer, comment="GPUs, or CPU rank slots without GPUs")
    gpu_model: Mapped[str | None] = mapped_column(String(128))
    gpu_memory_mb: Mapped[int | None] = mapped_column(Integer)
    memory_mb: Mapped[int | None] = mapped_column(
        Integer, comment="total RAM on CPU nodes, total GPU memory on GPU nodes; per slot a share"
    )
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(16), default="ready", comment="ready | cordoned")
    state_reason: Mapped[str | None] = mapped_column(
        Text, comment="why it is cordoned: by an operator, or automatically"
    )
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    telemetry: Mapped[dict[str, Any] | None] = mapped_column(
        comment="its ranks' utilisation and memory at the last heartbeat (agent telemetry)"
    )


class Allocation(Base):
    """Slots of one node held by one attempt of a job; released when the attempt ends."""

    __tablename__ = "allocations"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", "node_rank", name="uq_allocations_job_attempt_rank"),
        Index("ix_allocations_node_id_released_at", "node_id", "released_at"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"))
    node_rank: Mapped[int] = mapped_column(Integer)
    slots: Mapped[int] = mapped_column(Integer)
    rendezvous: Mapped[str | None] = mapped_column(String(255), comment="host:port, node rank 0")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    launched_at: Mapped[datetime | None] = mapped_column(comment="claimed by the node's worker")
    released_at: Mapped[datetime | None] = mapped_column()


class AttemptUsage(Base):
    """What one attempt's time went to, as its rank 0 counted it (training/accounting.py):
    the half of goodput that allocation rows cannot tell. Written as the attempt reports;
    `kept_step_s` once a later attempt resumed from a checkpoint of this one or before it."""

    __tablename__ = "attempt_usage"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    resumed_from_step: Mapped[int] = mapped_column(Integer)
    reached_step: Mapped[int] = mapped_column(Integer)
    first_step_at: Mapped[datetime | None] = mapped_column(comment="its first step began")
    step_s: Mapped[float] = mapped_column(Float, comment="in steps that still stand")
    recomputed_s: Mapped[float] = mapped_column(Float, comment="in steps it rewound itself")
    checkpoint_s: Mapped[float] = mapped_column(Float, comment="training blocked on saves")
    eval_s: Mapped[float] = mapped_column(Float)
    marks: Mapped[list[Any]] = mapped_column(JSON, comment="[[step, step_s]] at its last saves")
    kept_step_s: Mapped[float | None] = mapped_column(
        Float, comment="of step_s, up to where the next attempt resumed; null: all of it"
    )
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Metric(Base):
    __tablename__ = "metrics"
    __table_args__ = (
        Index("ix_metrics_job_id_name_step", "job_id", "name", "step"),
        Index("ix_metrics_job_id_id", "job_id", "id"),  # the stream's cursor
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    time: Mapped[datetime] = mapped_column(default=utcnow)


class LogLine(Base):
    """One line a rank wrote to stdout or stderr."""

    __tablename__ = "log_lines"
    __table_args__ = (
        Index("ix_log_lines_job_id_id", "job_id", "id"),
        Index("ix_log_lines_job_id_rank_id", "job_id", "rank", "id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    stream: Mapped[str] = mapped_column(String(6), comment="stdout | stderr")
    time: Mapped[datetime] = mapped_column(default=utcnow)
    line: Mapped[str] = mapped_column(Text)


class Webhook(Base):
    """A project's subscription: job state changes and metric thresholds, POSTed to `url`."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH), index=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(128), comment="signs payloads; never shown again")
    previous_secret: Mapped[str | None] = mapped_column(
        String(128), comment="the secret before the last rotation, also signing until its end"
    )
    previous_secret_until: Mapped[datetime | None] = mapped_column()
    states: Mapped[list[str]] = mapped_column(JSON, comment='job states, or ["*"]')
    sweep_events: Mapped[list[str]] = mapped_column(
        JSON, server_default="[]", comment='sweep event types (sweep.trial_pruned...), or ["*"]'
    )
    metric_thresholds: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # A row that never chose was made before the envelope: its receiver parses the flat form.
    payload_version: Mapped[str] = mapped_column(
        String(16),
        server_default="flat",
        comment="standard: the Standard Webhooks envelope; flat: the event alone",
    )
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """One notification to one webhook: queued with the change that caused it (the same
    transaction), sent and retried by the dispatcher; the table is the delivery log."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "job_id", "event_key", name="uq_webhook_deliveries_event"),
        Index("ix_webhook_deliveries_status_next", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    message_id: Mapped[str] = mapped_column(
        String(40), comment="webhook-id: msg_..., the same on every retry"
    )
    job_id: Mapped[str] = mapped_column(String(40))
    event_key: Mapped[str] = mapped_column(String(200), comment="what fired, once per job")
    event: Mapped[str] = mapped_column(String(32), comment="job.state | job.metric")
    payload: Mapped[dict[str, Any]] = mapped_column()
    status: Mapped[str] = mapped_column(String(10), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_until: Mapped[datetime | None] = mapped_column()
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column()


class Artifact(Base):
    """A file a job produced, completely in the artifact store under `sha256/<sha256>`: the row
    is written only after the object is (a listing never names half an object), and several
    rows may share one object (the same bytes are stored once)."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_artifacts_job_id_name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH))
    kind: Mapped[str] = mapped_column(
        String(16), comment="checkpoint | model | output | profile | sample"
    )
    name: Mapped[str] = mapped_column(String(255), comment="unique per job")
    step: Mapped[int | None] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64), index=True, comment="names the object")
    content_type: Mapped[str] = mapped_column(String(128))
    details: Mapped[dict[str, Any]] = mapped_column(
        default=dict, comment="lineage: precision, allreduce dtype, strategy, world size"
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Profile(Base):
    """One request for a `torch.profiler` capture of a running job's steps, and what became
    of it: requested -> capturing -> uploading -> done, or failed / cancelled. At most one
    per job is requested or capturing at a time (the partial unique index)."""

    __tablename__ = "profiles"
    __table_args__ = (
        Index("ix_profiles_job_id_created_at", "job_id", "created_at"),
        Index(
            "uq_profiles_one_open_per_job",
            "job_id",
            unique=True,
            postgresql_where=text("state IN ('requested', 'capturing')"),
            sqlite_where=text("state IN ('requested', 'capturing')"),
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer, comment="the attempt asked to capture")
    state: Mapped[str] = mapped_column(String(16))
    steps: Mapped[int] = mapped_column(Integer, comment="steps to capture")
    ranks: Mapped[list[int] | None] = mapped_column(JSON, comment="null: every rank")
    record_shapes: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str | None] = mapped_column(Text, comment="why it failed or was cancelled")
    start_step: Mapped[int | None] = mapped_column(Integer, comment="the first step captured")
    end_step: Mapped[int | None] = mapped_column(Integer, comment="the last step captured")
    artifacts: Mapped[list[str]] = mapped_column(JSON, default=list, comment="names it lists")
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()


class Bundle(Base):
    """A user's code bundle: an archive, checked before it was listed, whole in the artifact
    store under `sha256/<sha256>`. The same bytes uploaded again in one project are this row."""

    __tablename__ = "bundles"
    __table_args__ = (UniqueConstraint("project", "sha256", name="uq_bundles_project_sha256"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH))
    sha256: Mapped[str] = mapped_column(String(64), index=True, comment="names the object")
    size: Mapped[int] = mapped_column(BigInteger, comment="bytes of the archive")
    format: Mapped[str] = mapped_column(String(8), comment="zip | tar.gz")
    file_count: Mapped[int] = mapped_column(Integer)
    unpacked_size: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[list[Any]] = mapped_column(JSON, comment="[{path, size, kind}], as unpacked")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Dataset(Base):
    """One version of a user's named dataset: an archive (checked before it was listed) or a
    single file, whole in the artifact store under `sha256/<sha256>`. Versions count up per
    project and name; the same bytes uploaded again under a name are its existing version."""

    __tablename__ = "datasets"
    __table_args__ = (
        UniqueConstraint("project", "name", "version", name="uq_datasets_project_name_version"),
        UniqueConstraint("project", "name", "sha256", name="uq_datasets_project_name_sha256"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH))
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64), index=True, comment="names the object")
    size: Mapped[int] = mapped_column(BigInteger, comment="bytes as uploaded")
    format: Mapped[str] = mapped_column(String(8), comment="zip | tar.gz | file")
    filename: Mapped[str | None] = mapped_column(String(255), comment="of a single-file dataset")
    file_count: Mapped[int] = mapped_column(Integer)
    unpacked_size: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[list[Any]] = mapped_column(JSON, comment="[{path, size, kind}], as unpacked")
    summary: Mapped[dict[str, Any] | None] = mapped_column(
        comment="what its upload read of it (core/dataset_summary.py); null: nothing"
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OutboxMessage(Base):
    """A Celery message written in the same transaction as the decision it carries."""

    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_sent_at_id", "sent_at", "id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(String(160))
    task: Mapped[str] = mapped_column(String(128))
    kwargs: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column()
    send_attempts: Mapped[int] = mapped_column(Integer, default=0)


class FleetCounter(Base):
    """A fleet-wide counter, added to in the transaction that does what it counts, so it only
    goes up and every API process exports the same value. `shard` spreads one counter over
    rows written by different processes (a node's ingest), so they never wait on each other."""

    __tablename__ = "fleet_counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    label: Mapped[str] = mapped_column(String(32), primary_key=True, comment="a bucket, or ''")
    shard: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[float] = mapped_column(Float, default=0.0)


class Sweep(Base):
    """A hyperparameter (and precision) search: an Optuna study whose trials are jobs. The
    study itself is not stored: the controller rebuilds it each pass from these rows and
    its trials' (scheduler/sweeps.py), so there is one source of truth."""

    __tablename__ = "sweeps"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project: Mapped[str] = mapped_column(String(PROJECT_NAME_MAX_LENGTH), index=True)
    name: Mapped[str | None] = mapped_column(String(128))
    spec: Mapped[dict[str, Any]] = mapped_column(comment="the sweep spec with defaults filled")
    base_resolved: Mapped[dict[str, Any]] = mapped_column(
        comment="the base job spec resolved once, at submit (inputs, init_from)"
    )
    state: Mapped[str] = mapped_column(String(16), index=True, comment="RUNNING | SUCCEEDED...")
    reason: Mapped[str | None] = mapped_column(Text, comment="why it ended")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


class SweepTrial(Base):
    """One trial: Optuna's view of it (params with their distributions, intermediate values,
    state, values, system attributes the sampler and pruner keep) beside the job it runs as.
    Unique per (sweep, number): the controller's insert of a trial and its job is idempotent."""

    __tablename__ = "sweep_trials"
    __table_args__ = (
        UniqueConstraint("sweep_id", "number", name="uq_sweep_trials_sweep_id_number"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[str | None] = mapped_column(
        String(40), unique=True, comment="null: its job could never be admitted (reason says)"
    )
    state: Mapped[str] = mapped_column(
        String(16), comment="running | complete | pruned | failed | cancelled"
    )
    params: Mapped[dict[str, Any]] = mapped_column()
    distributions: Mapped[dict[str, Any]] = mapped_column(comment="Optuna's, as JSON")
    system_attrs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    intermediate: Mapped[dict[str, Any]] = mapped_column(
        default=dict, comment="{step: value} of the pruner's metric, as told to the pruner"
    )
    values: Mapped[list[Any] | None] = mapped_column(JSON, comment="one per objective")
    measures: Mapped[dict[str, Any]] = mapped_column(
        default=dict, comment="what the platform measured: samples/s, slot-seconds, precision"
    )
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()

    @property
    def measures_final(self) -> bool:
        """Its measures were taken after its job ended (a pruned trial's job stops later
        than the trial: it is measured again then; scheduler/sweep_trials.py)."""
        return self.state != "running" and bool((self.measures or {}).get("final"))


class SweepEvent(Base):
    """What happened to a sweep, in order: a trial started, was pruned, ended; the sweep
    ended. Written in the transaction that made it happen (core/sweep_events.py), with its
    webhook deliveries; the sweep's event stream reads these rows."""

    __tablename__ = "sweep_events"
    __table_args__ = (Index("ix_sweep_events_sweep_id_id", "sweep_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    time: Mapped[datetime] = mapped_column(default=utcnow)
    type: Mapped[str] = mapped_column(String(32), comment="sweep.trial_pruned, sweep.succeeded...")
    trial: Mapped[int | None] = mapped_column(
        Integer, comment="its trial number; null: the sweep's"
    )
    job_id: Mapped[str | None] = mapped_column(String(40), comment="the trial's job")
    message: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(
        default=dict, comment="the trial's params, values and state; the sweep's counts"
    )
