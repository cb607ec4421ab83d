"""The records rank 0 appends to `events.jsonl`, as the node agent accepts them.

Every byte a rank writes is hostile input to the agent, which runs outside the sandbox and
often as root: a record is parsed, then checked against the one strict schema of its kind
(types, ranges, sizes, counts, name patterns, no field the kind does not have) before
anything acts on it. A record that fails is rejected, never retried: the reader moves past
it and the caller tells the job (file, line, reason) while the attempt's other records go on.
Only the `started` record is essential: without a valid one the attempt cannot run.

The checks here are about shape. What a record may *name* (files beneath the attempt's own
folders, a profile of its own job) is checked where it is used: `beneath.py`, `ingest.py`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ampfleet.core.artifact_names import MAX_NAME_LENGTH, NAME_PATTERN
from ampfleet.core.ids import PROFILE_ID_PREFIX, id_pattern
from ampfleet.workers.start_phases import PHASE_PATTERN, PHASES

MAX_RECORD_BYTES = 256 << 10
"""One line: a metrics record of a few hundred values fits many times over."""
MAX_DETAILS_BYTES = 64 << 10
"""An artifact's details or a profile's summary, as JSON."""
MAX_STEP = 1 << 62
MAX_PATHS = 4096
"""Files in one artifact record (a checkpoint: DCP's shard per rank, metadata, RNG)."""
MAX_METRICS = 512
"""Values in one metrics record (per-rank compute times included)."""
SCRIPT_OWNED = "script"
"""The precision, AllReduce dtype and backend a plain script's `started` record names: the
script chose them, not the platform (a script that adopts `ampfleet.train` says what it
uses in a `setup` record)."""
ESSENTIAL_KINDS = frozenset({"started"})
"""Kinds without which the attempt cannot go on: one rejected fails the attempt."""

Step = Annotated[int, Field(ge=0, le=MAX_STEP)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Word = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
"""A strategy, backend or event reason."""
Dtype = Annotated[str, Field(pattern=r"^[a-z0-9]{1,8}$")]
"""A precision as the job row holds it (fp32, bf16, fp16)."""
METRIC_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./:-]{0,63}$"
MetricName = Annotated[str, Field(pattern=METRIC_NAME_PATTERN)]
ArtifactName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME_LENGTH)]
RankPath = Annotated[str, Field(min_length=1, max_length=4096)]
Message = Annotated[str, Field(max_length=8000)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    time: float | None = None


class _Setup(_Record):
    precision: Dtype
    allreduce_dtype: Dtype
    strategy: Word | None = None
    parameters_dtype: Word | None = None
    compute_dtype: Word | None = None
    gathered_dtype: Word | None = None
    reduction_dtype: Word | None = None
    optimizer_state_dtype: Word | None = None
    frozen_dtype: Word | None = None


class Started(_Setup):
    kind: Literal["started"]
    total_steps: Step | None
    resumed_from_step: Step
    world_size: Annotated[int, Field(ge=1, le=1 << 20)]
    backend: Word


class Setup(_Setup):
    kind: Literal["setup"]


class Metrics(_Record):
    kind: Literal["metrics"]
    step: Step
    values: Annotated[dict[MetricName, float], Field(max_length=MAX_METRICS)]


class Progress(_Record):
    kind: Literal["progress"]
    step: Step
    total_steps: Step | None


class AtStep(_Record):
    kind: Literal["rewound", "preempted"]
    step: Step


class Usage(_Record):
    kind: Literal["usage"]
    step: Step
    resumed_from_step: Step
    first_step_at: Annotated[float, Field(allow_inf_nan=False)] | None
    step_s: Seconds
    recomputed_s: Seconds
    checkpoint_s: Seconds
    eval_s: Seconds
    marks: Annotated[list[tuple[Step, Seconds]], Field(max_length=64)]


class Event(_Record):
    kind: Literal["event"]
    reason: Word
    message: Message


class Compute(_Record):
    kind: Literal["compute"]
    step_flops: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    peak_flops_per_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None
    message: Message


class Artifact(_Record):
    kind: Literal["artifact"]
    artifact_kind: Literal["checkpoint", "model", "output", "profile", "sample"]
    name: ArtifactName
    paths: Annotated[list[RankPath], Field(min_length=1, max_length=MAX_PATHS)]
    step: Step | None
    details: dict[str, Any] = Field(default_factory=dict)


class Profile(_Record):
    kind: Literal["profile"]
    profile_id: Annotated[str, Field(pattern=id_pattern(PROFILE_ID_PREFIX))]
    state: Literal["capturing", "uploading", "failed"]
    start_step: Step | None = None
    end_step: Step | None = None
    ranks: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=1 << 16)] = []
    artifacts: Annotated[list[ArtifactName], Field(max_length=1 << 16)] = []
    summary: dict[str, Any] | None = None
    reason: Message | None = None


class StartPhases(_Record):
    kind: Literal["start_phases"]
    warm: bool
    ends: Annotated[
        dict[
            Annotated[str, Field(pattern=PHASE_PATTERN)],
            Annotated[float, Field(ge=0, allow_inf_nan=False)],
        ],
        Field(max_length=len(PHASES)),
    ]
    """When each phase ended, wall-clock seconds (workers/start_phases.py)."""


class Finished(_Record):
    kind: Literal["finished"]


AnyRecord = Annotated[
    Started
    | Setup
    | Metrics
    | Progress
    | AtStep
    | Usage
    | Event
    | Compute
    | Artifact
    | Profile
    | StartPhases
    | Finished,
    Field(discriminator="kind"),
]
_RECORD: TypeAdapter[AnyRecord] = TypeAdapter(AnyRecord)
_NUL_ESCAPE = re.compile(rb"\\u0000", re.IGNORECASE)


@dataclass(frozen=True)
class Rejected:
    """A line of the records file that was not a record the agent accepts."""

    line: int
    """1-based, in the file."""
    kind: str | None
    """What it claimed to be, when that much could be read."""
    reason: str

    @property
    def essential(self) -> bool:
        return self.kind in ESSENTIAL_KINDS

    def describe(self, file_name: str) -> str:
        what = f"a {self.kind!r} record" if self.kind else "a record"
        return f"{file_name} line {self.line}: {what} was rejected: {self.reason}"


def parse(line: bytes, number: int) -> dict[str, Any] | Rejected:
    """One line as the record it must be (as a plain dict of its checked fields), or why not."""
    if len(line) > MAX_RECORD_BYTES:
        return Rejected(number, None, f"longer than {MAX_RECORD_BYTES} bytes")
    if b"\x00" in line or _NUL_ESCAPE.search(line):
        return Rejected(number, None, "holds a NUL character")  # no database stores it
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return Rejected(number, None, f"not JSON ({type(exc).__name__})")
    claimed = raw.get("kind") if isinstance(raw, dict) else None
    kind = claimed if isinstance(claimed, str) and len(claimed) <= 32 else None
    try:  # JSON mode: a JSON number is a float, an array a tuple, NaN is no number
        record = _RECORD.validate_json(line)
    except ValidationError as exc:
        return Rejected(number, kind, _first_error(exc))
    problem = _problem_of(record)
    if problem is not None:
        return Rejected(number, kind, problem)
    return record.model_dump(exclude_unset=True)


def _problem_of(record: AnyRecord) -> str | None:
    """What a schema alone cannot say: bounded nested sizes, names that belong to their kind.
    A metric value may be non-finite (a skipped step's loss): the series keep only finite
    points (workers/series.py), the record's other values still count."""
    if isinstance(record, Artifact | Profile):
        nested = record.details if isinstance(record, Artifact) else record.summary
        try:
            size = len(json.dumps(nested, allow_nan=False))
        except (ValueError, TypeError, RecursionError):
            return "details: not plain JSON"
        if size > MAX_DETAILS_BYTES:
            return f"details: over {MAX_DETAILS_BYTES} bytes"
    if isinstance(record, Artifact):
        return _artifact_name_problem(record)
    return None


def _artifact_name_problem(record: Artifact) -> str | None:
    from ampfleet.core.artifact_names import (
        HF_PREFIX,
        MANIFEST,
        MODEL,
        MODEL_BF16,
        OUTPUTS_PREFIX,
        PROFILES_PREFIX,
        SAMPLE_KIND,
        checkpoint_name,
        samples_name,
    )

    name, kind = record.name, record.artifact_kind
    if kind == "checkpoint":
        if record.step is None or name != checkpoint_name(record.step):
            return "name: a checkpoint is named checkpoint-<its step, 9 digits>"
    elif kind == "model":
        named = name in (MODEL, MODEL_BF16, MANIFEST) or name.startswith(HF_PREFIX)
        if not named or len(record.paths) != 1:
            return (
                f"name: a model file is one of {MODEL}, {MODEL_BF16}, {MANIFEST} "
                f"or {HF_PREFIX}<path>"
            )
    elif kind == "output":
        if not name.startswith(OUTPUTS_PREFIX) or len(record.paths) != 1:
            return f"name: an output is one file named {OUTPUTS_PREFIX}<path>"
    elif kind == SAMPLE_KIND:
        if record.step is None or name != samples_name(record.step) or len(record.paths) != 1:
            return "name: samples are one file named samples/step-<its step, 9 digits>.txt"
    elif not name.startswith(PROFILES_PREFIX) or len(record.paths) != 1:
        return f"name: a profile's file is one file named {PROFILES_PREFIX}<id>/<file>"
    return None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where or 'record'}: {first.get('msg', 'invalid')}"[:300]
