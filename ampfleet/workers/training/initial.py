"""Starting a run from another job's checkpoint (`init_from`), where the job has none of its
own yet: its weights only (fine-tuning: step 0, the optimizer as the run built it), or its
whole training state (continuing: weights, optimizer, RNG, data position and step, as a
resume would, in any world size or strategy). The node agent fetched the checkpoint and the
job file says where it is (workers/initial_checkpoint.py). Shared by the built-in loop and
the rank-side API."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn
from torch.optim import Optimizer

from ampfleet.workers.training import checkpoint


class InitFromError(RuntimeError):
    """The checkpoint `init_from` names cannot start this run (another model's, say)."""


@dataclass(frozen=True)
class Initial:
    path: Path
    """The checkpoint's folder (`ckpt-<step>/`), read-only."""
    load: str
    """'weights' or 'full'."""
    job: str
    step: int

    @classmethod
    def of_job(cls, job: Mapping[str, Any]) -> Initial | None:
        """From the job file's `init_from` (the agent's), or None where it has none."""
        init = job.get("init_from")
        if not init:
            return None
        return cls(Path(init["path"]), str(init["load"]), str(init["job"]), int(init["step"]))

    def describe(self) -> str:
        if self.load == "full":
            return (
                f"continues job {self.job} from its checkpoint of step {self.step} (weights, "
                "optimizer, RNG and data position)"
            )
        return f"starts from the weights of job {self.job} at step {self.step}"


def start_from(
    initial: Initial,
    model: nn.Module,
    optimizer: Optimizer,
    *,
    rank: int,
    world_size: int,
    extra: dict[str, Any] | None = None,
) -> checkpoint.Restored | None:
    """'full': the whole state restored, as a resume restores its own (returns what it
    restored); 'weights': the model's weights loaded, the rest left as built (returns None:
    the run starts at step 0). Collective."""
    # DCP only here: a run that starts from nothing never imports it before its first step.
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    try:
        if initial.load == "full":
            return checkpoint.restore(
                initial.path, model, optimizer, rank=rank, world_size=world_size, extra=extra
            )
        weights = get_model_state_dict(model)
        checkpoint.load(initial.path, {"model": weights})
        set_model_state_dict(model, weights)
        return None
    # DCP's own error is a BaseException: a mismatch on any rank, gathered.
    except (CheckpointException, RuntimeError, ValueError, KeyError, OSError) as exc:
        raise InitFromError(
            f"init_from: the checkpoint of step {initial.step} of job {initial.job} cannot "
            f"start this run ({type(exc).__name__}: {str(exc)[:600]}); 'weights' needs the "
            "same model (names and shapes of its parameters), 'full' the same optimizer too"
        ) from exc
