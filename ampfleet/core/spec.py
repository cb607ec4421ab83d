"""The job spec: what a client submits, validated, then stored with every default resolved."""

from __future__ import annotations

import re
import shlex
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ampfleet.core.ids import id_pattern
from ampfleet.core.project_names import ProjectName
from ampfleet.core.requirements import MAX_REQUIREMENT_LENGTH, checked_requirement

# Names and labels may end up in file names, log lines and URLs: keep them boring.
SafeName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
LabelValue = Annotated[str, StringConstraints(max_length=256)]
_DATASET_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
DatasetName = Annotated[str, StringConstraints(pattern=rf"^{_DATASET_NAME}$")]
_JOB_MODEL = id_pattern("job").removeprefix("^").removesuffix("$")
InputRef = Annotated[
    str,
    StringConstraints(
        max_length=1024,
        pattern=rf"^(file:///[^\x00]+|job:{_JOB_MODEL}|{_DATASET_NAME}(@[1-9][0-9]{{0,8}})?)$",
    ),
]
MAX_INPUTS = 16
MAX_HYPERPARAMETERS = 64


class Precision(StrEnum):
    AUTO = "auto"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return {"low": 0, "normal": 1, "high": 2}[self.value]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(_Strict):
    """Either an explicit shape (`nodes` x `procs_per_node`, default 1 x 1) or a total
    (`procs`), which the scheduler packs onto the fewest nodes."""

    nodes: int | None = Field(None, ge=1, le=64, description="Nodes the job spans.")
    procs_per_node: int | None = Field(
        None, ge=1, le=64, description="Rank processes per node: one per GPU, or per CPU slot."
    )
    procs: int | None = Field(
        None, ge=1, le=4096, description="Total ranks, packed onto the fewest nodes."
    )
    accelerator: Literal["any", "cuda", "cpu"] = Field(
        "any", description="'cuda' needs GPU nodes, 'cpu' CPU nodes, 'any' takes either."
    )
    gpu_type: str | None = Field(None, max_length=128, description="Required GPU model substring.")
    min_gpu_memory_mb: int | None = Field(None, ge=1, le=10**8, description="Per GPU.")
    selector: dict[SafeName, LabelValue] = Field(
        default_factory=dict, max_length=16, description="Node labels to match, e.g. pool."
    )
    procs_min: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Fewest ranks the job accepts on a restart (it resumes from its "
        "checkpoint resharded onto them); default: exactly its shape.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_shape(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("procs") is not None:
            if data.get("nodes") is not None or data.get("procs_per_node") is not None:
                raise ValueError("give either procs, or nodes and procs_per_node, not both")
            return data
        return {"nodes": 1, "procs_per_node": 1, **{k: v for k, v in data.items() if v is not None}}

    @model_validator(mode="after")
    def _procs_min_fits(self) -> Resources:
        if self.procs_min is not None and self.procs_min > self.gang_size:
            raise ValueError(
                f"procs_min ({self.procs_min}) exceeds the job's {self.gang_size} ranks"
            )
        return self

    @property
    def gang_size(self) -> int:
        if self.procs is not None:
            return self.procs
        return (self.nodes or 1) * (self.procs_per_node or 1)


class Stop(_Strict):
    """When training ends: after `max_steps` or `epochs` (whichever comes first), with
    `max_runtime_s` as a limit on each attempt (past it, TIMED_OUT); or, given alone,
    when `max_runtime_s` is up: the job trains until then and finishes like any other
    (final evaluation, checkpoint, model), SUCCEEDED."""

    max_steps: int | None = Field(
        None,
        ge=0,
        le=10_000_000,
        description="Optimizer steps. 0, with `init_from`: no training, the checkpoint "
        "evaluated and exported as a model (a checkpoint of a step exported).",
    )
    epochs: int | None = Field(None, ge=1, le=100_000, description="Passes over the train set.")
    max_runtime_s: int | None = Field(
        None,
        ge=1,
        le=10**8,
        description="Seconds per attempt. With max_steps or epochs a limit (-> TIMED_OUT); "
        "alone, how long to train (then evaluate, checkpoint and export -> SUCCEEDED).",
    )

    @property
    def has_end(self) -> bool:
        return not (self.max_steps is None and self.epochs is None and self.max_runtime_s is None)

    @property
    def runtime_only(self) -> bool:
        """The time is the goal, not a limit: the ranks stop themselves when it is up."""
        return self.max_steps is None and self.epochs is None


class CheckpointPolicy(_Strict):
    every_steps: int = Field(0, ge=0, le=10**9, description="0 checkpoints only at the end.")
    keep_last: int = Field(2, ge=1, le=100)


class ExportPolicy(_Strict):
    dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="A SUCCEEDED job exports model.safetensors, its fp32 master weights; "
        "'bf16' adds model-bf16.safetensors, the same weights rounded to bf16.",
    )


class Monitoring(_Strict):
    """What the platform watches in a running job, and when it acts."""

    hang_timeout_s: int | None = Field(
        None,
        ge=10,
        le=7 * 24 * 3600,
        description="No rank moving on to another phase of its step (data, forward, backward, "
        "optimizer, evaluation, checkpoint) for this long is a hang: every rank's Python "
        "stacks go to its log and the attempt restarts from its checkpoint. Default: the "
        "node's AMPFLEET_HANG_TIMEOUT_S.",
    )
    straggler_factor: float = Field(
        1.5,
        ge=1.05,
        le=100,
        description="A rank whose compute time per step is this many times the other ranks' "
        "median ...",
    )
    straggler_reports: int = Field(
        3,
        ge=1,
        le=1000,
        description="... on this many reported steps in a row is a straggler (an event); "
        "it keeps pace again (another) at most halfway back to the others' pace as long.",
    )
    straggler_sustained_s: float = Field(
        60.0,
        ge=0,
        le=7 * 24 * 3600,
        description="... and those reported steps span at least this many seconds: ranks "
        "that share a busy machine take turns being slow for seconds at a time, which is "
        "noise; a slower device or node stays slower for minutes.",
    )


class Parallelism(_Strict):
    """How the ranks share the model: every rank a whole replica (DDP), or each rank a shard
    of the fp32 master weights and optimizer states (FSDP2, gathered per block for compute
    in the job's precision, gradients reduce-scattered in its `allreduce_dtype`)."""

    strategy: Literal["auto", "ddp", "fsdp"] = Field(
        "auto",
        description="'auto': FSDP when the model states (parameters, gradients, optimizer "
        "states) exceed `auto_memory_share` of one rank's memory, DDP otherwise.",
    )
    auto_memory_share: float = Field(
        0.5, gt=0.0, le=1.0, description="The share of a rank's memory 'auto' allows DDP."
    )
    reshard_after_forward: bool = Field(
        True,
        description="FSDP frees each block's gathered parameters after its forward and "
        "gathers them again for backward: less memory, one more all-gather per block.",
    )
    activation_checkpointing: Literal["none", "full"] = Field(
        "none", description="'full' recomputes each block's activations in backward."
    )
    compile: bool = Field(
        False,
        description="torch.compile each block; refused at start where the node has no "
        "compiler toolchain.",
    )


JobId = Annotated[str, StringConstraints(pattern=id_pattern("job"))]


class InitFrom(_Strict):
    """Start from another job's checkpoint, of the same project: its weights (fine-tuning:
    step 0, a fresh optimizer) or its whole training state (continuing: weights, optimizer,
    RNG, data position and step count). A job's own checkpoints, once it has one, come
    first on a restart."""

    job: JobId = Field(description="`job_...`: the job whose checkpoint to start from.")
    checkpoint: Literal["latest"] | Annotated[int, Field(ge=0, le=10**9)] = Field(
        "latest", description="'latest', or the step of one of its listed checkpoints."
    )
    load: Literal["weights", "full"] = Field(
        "weights",
        description="'weights': the model's weights only, then train from step 0 with a "
        "fresh optimizer; 'full': continue its training where it stopped (`stop.max_steps` "
        "is then the total, past the checkpoint's step).",
    )


class RetryPolicy(_Strict):
    max_restarts: int = Field(2, ge=0, le=100, description="Restarts after node loss or crash.")


BundleId = Annotated[str, StringConstraints(pattern=r"^bnd_[0-9a-z]{26}$")]
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
EntryPoint = Annotated[
    str,
    StringConstraints(max_length=200, pattern=rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}$"),
]


Requirement = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_REQUIREMENT_LENGTH),
    AfterValidator(checked_requirement),
]


MAX_COMMAND_ARGS = 64
MAX_COMMAND_ARG_LENGTH = 4096
PYTHON_PROGRAMS = frozenset({"python", "python3"})
"""A command's programs that mean the job's interpreter (its requirements environment's)."""
_PROGRAM = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.+/-]{0,255}$")
LAUNCHERS = frozenset({"torchrun", "mpirun", "srun"})
"""Programs that start ranks themselves: under the platform's torchrun they would nest."""


def _checked_argument(argument: str) -> str:
    if "\x00" in argument:
        raise ValueError("an argument holds a NUL character")
    return argument


CommandArgument = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_COMMAND_ARG_LENGTH),
    AfterValidator(_checked_argument),
]


def _checked_command(command: list[str]) -> list[str]:
    """The first argument is a program: a name looked up on the rank's PATH (`python` is the
    job's interpreter) or a path inside the bundle, never one that leaves it."""
    program = command[0]
    parts = program.split("/")
    if not _PROGRAM.fullmatch(program) or program.startswith("/") or ".." in parts:
        raise ValueError(
            f"command[0] {program[:80]!r} is not a program name: give one (python, bash) or a "
            "relative path inside the bundle (letters, digits, . _ + - /; no '..')"
        )
    runs_module = command[0] in PYTHON_PROGRAMS and command[1:3] == ["-m", "torch.distributed.run"]
    if parts[-1] in LAUNCHERS or runs_module:
        raise ValueError(
            f"command runs {program}, a launcher: the platform runs the command on every rank "
            "under its own torchrun; give what torchrun would run (python train.py ...)"
        )
    return command


def command_script(command: list[str]) -> str | None:
    """The script a command runs, as it names it: the argument after `python` (when it is no
    option), or the program itself when it ends in .py; None for anything else."""
    if command[0] in PYTHON_PROGRAMS:
        return command[1] if len(command) > 1 and not command[1].startswith("-") else None
    return command[0] if command[0].endswith(".py") else None


def describe_command(command: list[str], limit: int = 200) -> str:
    """A command as one line for messages and manifests, shell-quoted, cut to `limit`."""
    line = shlex.join(command)
    return line if len(line) <= limit else line[: limit - 3] + "..."


class CodeSpec(_Strict):
    """The user's own code, from an uploaded bundle: a recipe (`entrypoint`) or a command run
    as it is on every rank (`command`, script mode). Resolved and run only on the worker (the
    API never imports it), so a recipe's hyperparameters are validated there."""

    bundle: BundleId = Field(description="`bnd_...` from POST /v1/bundles, of the job's project.")
    entrypoint: EntryPoint | None = Field(
        None,
        description="`package.module:attribute` inside the bundle, naming a RecipeDefinition. "
        "Give this or `command`.",
    )
    command: (
        Annotated[
            list[CommandArgument],
            Field(min_length=1, max_length=MAX_COMMAND_ARGS),
            AfterValidator(_checked_command),
        ]
        | None
    ) = Field(
        None,
        description='Script mode: the program and its arguments (`["python", "train.py", '
        '"--epochs", "3"]`), run as it is on every rank under the platform\'s torchrun, '
        "from the bundle's folder, with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, "
        "...) and AMPFLEET_OUTPUT_DIR and the others the README lists. `python` is the job's "
        "interpreter. Give this or `entrypoint`.",
    )
    requirements: list[Requirement] = Field(
        default_factory=list,
        max_length=100,
        description="Packages of the configured index, as a name, optional [extras] and an "
        "optional version specifier (`numpy>=2`, `einops==0.8.*`); direct references (`@ URL`, "
        "paths, VCS), pip options and environment markers are refused. Installed from wheels "
        "only, once per node and set, into an environment over the worker's own (torch stays "
        "the worker's).",
    )

    @model_validator(mode="after")
    def _entrypoint_or_command(self) -> CodeSpec:
        if (self.entrypoint is None) == (self.command is None):
            raise ValueError(
                "give exactly one of `entrypoint` (a recipe in the bundle) or `command` "
                "(a program run as it is on every rank)"
            )
        return self

    @property
    def is_script(self) -> bool:
        return self.command is not None


class JobSpec(_Strict):
    """A training job as submitted over HTTP."""

    name: SafeName | None = None
    project: ProjectName = "default"
    # `code` before `recipe`: the check of `recipe` sees it.
    code: CodeSpec | None = Field(None, description="Or the user's own recipe, from a bundle.")
    recipe: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        None,
        validate_default=True,
        description="A registered recipe (GET /v1/recipes); or give `code`.",
    )
    hyperparameters: dict[str, Any] = Field(default_factory=dict, max_length=MAX_HYPERPARAMETERS)
    init_from: InitFrom | None = Field(
        None, description="Start from another job's checkpoint (fine-tune or continue)."
    )
    inputs: dict[SafeName, InputRef] = Field(
        default_factory=dict,
        max_length=MAX_INPUTS,
        description="Read-only inputs of every rank, by the name the recipe reads them under "
        "(`ctx.inputs[name]`): `dataset@version` (or `dataset`, its newest version when "
        "submitted) from POST /v1/datasets, `file:///...` under a folder the operator "
        "allows (AMPFLEET_DATA_ROOTS), or `job:job_...`, the Hugging Face model (`hf/merged/`) "
        "a SUCCEEDED job of the project exported (fine-tuning a fine-tune).",
    )
    resources: Resources = Field(default_factory=Resources)
    precision: Precision = Precision.AUTO
    allreduce_dtype: Precision = Precision.AUTO
    parallelism: Parallelism = Field(default_factory=Parallelism)
    stop: Stop = Field(default_factory=lambda: Stop(max_steps=100))
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    export: ExportPolicy = Field(default_factory=ExportPolicy)
    priority: Priority = Priority.NORMAL
    labels: dict[SafeName, LabelValue] = Field(default_factory=dict, max_length=64)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    eval_every_steps: int = Field(0, ge=0, le=10**9, description="0 evaluates only at the end.")
    log_every_steps: int = Field(10, ge=1, le=10**9, description="Metrics every N steps.")

    @field_validator("recipe")
    @classmethod
    def _recipe_or_code(cls, recipe: str | None, info: ValidationInfo) -> str | None:
        if "code" not in info.data:  # `code` was given and is wrong: that error says it
            return recipe
        if (recipe is None) == (info.data["code"] is None):
            raise ValueError("give either `recipe` (a registered one) or `code` (a bundle)")
        return recipe

    @model_validator(mode="before")
    @classmethod
    def _a_script_has_no_default_steps(cls, data: Any) -> Any:
        """Without `stop`, a script has no step count (its own loop decides), not the 100
        steps a recipe gets: the stop with no end that only a script may have."""
        code = data.get("code") if isinstance(data, dict) else None
        if isinstance(code, dict) and code.get("command") is not None and "stop" not in data:
            return {**data, "stop": {}}
        return data

    @field_validator("stop")
    @classmethod
    def _an_end_that_fits_the_code(cls, stop: Stop, info: ValidationInfo) -> Stop:
        """A recipe's loop needs an end. A script decides its own: `stop.max_steps` is its
        total (it reads AMPFLEET_MAX_STEPS; the rank-side API reports progress against it
        and stops there), its passes over its data are its own."""
        code = info.data.get("code")  # `code` comes first; absent when it was wrong
        script = code is not None and code.is_script
        if stop.max_steps == 0 and (script or info.data.get("init_from") is None):
            raise ValueError(
                "max_steps 0 trains nothing: it evaluates and exports the checkpoint that "
                "`init_from` names, in a recipe's loop; give init_from, or 1 or more steps"
            )
        if not script:
            if not stop.has_end:
                raise ValueError(
                    "give max_steps, epochs or max_runtime_s (alone, it trains until the "
                    "time is up); leave `stop` out for the default of 100 steps"
                )
            return stop
        if stop.epochs is not None:
            raise ValueError(
                "a command (script mode) counts its own passes over its data (no epochs); "
                "give max_steps (its total) or max_runtime_s (a limit per attempt)"
            )
        return stop

    @property
    def is_script(self) -> bool:
        """Script mode: `code.command` runs as it is, not the platform's training loop."""
        return self.code is not None and self.code.is_script
