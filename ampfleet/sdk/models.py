"""What the API returns, as typed, read-only objects.

The models describe the wire format from the client's side: fields the server adds later are
ignored, and optional fields have defaults, so an older SDK keeps working against a newer API.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ampfleet.core.profile_states import ProfileState
from ampfleet.core.spec import Precision, Priority
from ampfleet.core.states import JobState


class ApiModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Progress(ApiModel):
    step: int = 0
    total_steps: int | None = None  # None: not started yet, or a runtime-only job
    fraction: float | None = None
    eta_seconds: float | None = None
    eta_confidence: Literal["low", "medium", "high"] | None = None
    steps_per_s: float | None = None  # the pace the ETA comes from


class QueueInfo(ApiModel):
    """Why a queued job waits, as the scheduler saw it on its last pass."""

    position: int | None = None
    pending_reason: str | None = None
    estimated_start_at: datetime | None = None
    not_before: datetime | None = None


class PrecisionSetting(ApiModel):
    requested: Precision
    effective: str | None = None


class Goodput(ApiModel):
    """Slot-seconds its attempts held and where they went (the kinds add up to allocated)."""

    allocated_slot_s: float = 0.0
    training_slot_s: float = 0.0
    startup_slot_s: float = 0.0
    recomputed_slot_s: float = 0.0
    checkpoint_slot_s: float = 0.0
    evaluation_slot_s: float = 0.0
    other_slot_s: float = 0.0
    queued_s: float = 0.0
    attempts: int = 0
    ratio: float | None = None  # training / allocated


class Job(ApiModel):
    id: str
    project: str
    recipe: str
    state: JobState
    priority: Priority
    progress: Progress
    precision: PrecisionSetting
    allreduce_dtype: PrecisionSetting
    created_at: datetime
    updated_at: datetime
    name: str | None = None
    attempt: int = 0
    gang_size: int = 1  # ranks, placed together
    queue: QueueInfo | None = None
    latest_metrics: dict[str, float] = Field(default_factory=dict)
    failure_reason: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    sweep_id: str | None = None  # the sweep it is a trial of
    trial: int | None = None  # its trial number in that sweep
    spec: dict[str, Any] = Field(default_factory=dict)
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    goodput: Goodput | None = None  # on `client.get(id)`; None in listings

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal()


class JobPage(ApiModel):
    items: list[Job]
    next_cursor: str | None = None


class Event(ApiModel):
    """A state transition (`kind == "transition"`) or another notable event (`"info"`)."""

    id: int
    job_id: str
    attempt: int
    time: datetime
    kind: str
    reason: str = ""
    message: str = ""
    from_state: JobState | None = None
    to_state: JobState | None = None


class EventPage(ApiModel):
    items: list[Event]
    next_after: int | None = None  # the `after` of the next page; None on the last


class LogLine(ApiModel):
    """A line a rank wrote; `id` orders the lines of a job (pass it on to go on after it)."""

    id: int
    attempt: int
    rank: int
    stream: Literal["stdout", "stderr"]
    time: datetime
    line: str


class LogPage(ApiModel):
    items: list[LogLine]
    next_after: int | None = None
    dropped_lines: int = 0


class MetricPoint(ApiModel):
    """One point; when the series is downsampled, the mean of a bucket with its min and max."""

    step: int
    value: float
    min: float | None = None
    max: float | None = None
    count: int | None = None


class SeriesSummary(ApiModel):
    """`goal`, `best` and `best_step` only for an objective (loss, val_accuracy, what the
    recipe declares); None for the other series (learning_rate, grad_norm, ...)."""

    count: int
    last_step: int
    min: float
    max: float
    best: float | None = None
    goal: Literal["min", "max"] | None = None
    last: float | None = None
    best_step: int | None = None


class MetricSeries(ApiModel):
    name: str
    points: list[MetricPoint]
    summary: SeriesSummary
    downsampled: bool = False

    @property
    def steps(self) -> list[int]:
        return [p.step for p in self.points]

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


class Finding(ApiModel):
    rule: str
    severity: str
    title: str
    evidence: str
    advice: str


class StepBreakdown(ApiModel):
    steps: int
    to_step: int
    step_time_s: float | None = None
    shares: dict[str, float] = Field(default_factory=dict)
    mfu: float | None = None
    cpu_percent_by_rank: dict[int, float] = Field(default_factory=dict)


class Diagnosis(ApiModel):
    """Why a job's accelerators idle: its latest steps' breakdown and the findings on it,
    most severe first."""

    job_id: str
    state: str
    breakdown: StepBreakdown
    findings: list[Finding] = Field(default_factory=list)


class JobMetrics(ApiModel):
    """A job's metric series, and `last_metric_id`: the newest point they cover, where a
    live stream can take over (`stream_cursor`) without sending these points again."""

    job_id: str
    series: list[MetricSeries]
    last_metric_id: int = 0

    def stream_cursor(self, last_event_id: int) -> str:
        """The `last_event_id` for `stream_events` that goes on after the event with id
        `last_event_id` (the newest you have, 0 for none) and after these points."""
        return f"{last_event_id}:{self.last_metric_id}"


class Node(ApiModel):
    id: str
    accelerator: str
    slots: int
    used_slots: int
    free_slots: int
    state: str
    alive: bool
    last_heartbeat_at: datetime
    registered_at: datetime
    gpu_model: str | None = None
    gpu_memory_mb: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    heartbeat_age_seconds: float = 0.0


class Key(ApiModel):
    id: str
    project: str
    role: str = Field(description="`admin`, `write` or `read`.")
    created_at: datetime
    name: str = ""
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class CreatedKey(Key):
    key: str = Field(description="The key itself; the API shows it this once.")


class ConsoleLogin(ApiModel):
    """A one-time login for the web console: `url` opens it logged in as the key that asked,
    once, until `expires_at`."""

    token: str
    expires_at: datetime
    expires_in_s: float = Field(description="Its lifetime, from when it was asked for.")
    url: str


class Artifact(ApiModel):
    """A file a job produced: `kind` is checkpoint, model, output or profile."""

    kind: str
    name: str
    size: int
    sha256: str
    download_url: str
    step: int | None = None
    attempt: int = 0
    content_type: str = "application/octet-stream"
    created_at: datetime | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class ProfileArtifact(ApiModel):
    name: str
    listed: bool = Field(description="Stored and downloadable (false while it uploads).")
    size: int | None = None
    sha256: str | None = None


class Profile(ApiModel):
    """A capture of a running job's steps with torch.profiler: its state, the files it
    stores (a Chrome/Perfetto trace per rank and `summary.json`) and the summary itself."""

    id: str
    job_id: str
    state: ProfileState
    steps: int
    attempt: int = 0
    ranks: list[int] | None = None
    record_shapes: bool = False
    start_step: int | None = None
    end_step: int | None = None
    reason: str | None = None
    artifacts: list[ProfileArtifact] = Field(default_factory=list)
    summary: dict[str, Any] | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def is_final(self) -> bool:
        """Done, failed or cancelled: it changes no more."""
        return self.state.is_final()


class Checkpoint(ApiModel):
    step: int
    size: int
    sha256: str
    download_url: str
    attempt: int = 0
    created_at: datetime | None = None
    lineage: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    """What the job reported at this step (its loss, its evaluation's metrics)."""


class Sample(ApiModel):
    """What the model generated at one evaluation: each prompt and its completion."""

    step: int
    text: str
    truncated: bool = False
    download_url: str = ""
    attempt: int = 0
    created_at: datetime | None = None


# -- frames of a job's live stream (`Client.stream_events`) ----------------------------------


class Frame(ApiModel):
    """One frame of a live stream; pass `id` as `last_event_id` to resume after it."""

    id: str | None = None


class StateFrame(Frame):
    kind: Literal["state"] = "state"
    event: Event


class EventFrame(Frame):
    kind: Literal["event"] = "event"
    event: Event


class ProgressFrame(Frame):
    kind: Literal["progress"] = "progress"
    state: JobState
    step: int
    total_steps: int | None = None
    latest_metrics: dict[str, float] = Field(default_factory=dict)
    eta_seconds: float | None = None
    eta_confidence: Literal["low", "medium", "high"] | None = None
    steps_per_s: float | None = None
    queue: QueueInfo | None = None
    """While the job is queued: where it stands and why it waits."""


class MetricSample(ApiModel):
    step: int
    name: str
    value: float


class MetricsFrame(Frame):
    kind: Literal["metrics"] = "metrics"
    points: list[MetricSample]


class EndFrame(Frame):
    """The last frame: the job reached a terminal state and everything has been sent."""

    kind: Literal["end"] = "end"
    state: JobState


JobFrame = Annotated[
    StateFrame | EventFrame | ProgressFrame | MetricsFrame | EndFrame,
    Field(discriminator="kind"),
]
job_frame_adapter: TypeAdapter[JobFrame] = TypeAdapter(JobFrame)


class Recipe(ApiModel):
    """An installed recipe: what a spec's `recipe` names, and the JSON Schema of the
    hyperparameters it accepts (`hyperparameters["properties"]`: type, default, bounds)."""

    name: str
    description: str
    hyperparameters: dict[str, Any]
    metrics: dict[str, str] = Field(default_factory=dict)
    default_parameters: int
    default_rank_memory_mb: int


class ArchivedFile(ApiModel):
    path: str
    size: int = 0
    kind: str = "file"


class Bundle(ApiModel):
    """A code bundle: name its id in a spec's `code.bundle`."""

    id: str
    project: str
    sha256: str
    size: int
    format: str
    file_count: int = 0
    unpacked_size: int = 0
    created_at: datetime | None = None
    files: list[ArchivedFile] = Field(default_factory=list)


class Dataset(ApiModel):
    """One version of a named dataset: a spec's `inputs` names it `name@version`."""

    id: str
    project: str
    name: str
    version: int
    sha256: str
    size: int
    format: str
    filename: str | None = None
    file_count: int = 0
    unpacked_size: int = 0
    created_at: datetime | None = None
    files: list[ArchivedFile] = Field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"
