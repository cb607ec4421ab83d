"""train.py with ampfleet's rank-side API, `ampfleet.train`, added: the job's precision (its
autocast, with fp32 master weights), its gradient AllReduce dtype and numerical guard, the
metrics and progress the platform shows, checkpoints it uploads and resumes from on a
restart, and a clean stop when the job is preempted or cancelled. The model, the data and
the optimizer are train.py's.

The session reads the job from the run folder ampfleet prepares, so this script runs inside
a job (on this machine too):

    ampfleet run-local job-session.yaml --code . --procs 2
    ampfleet submit job-session.yaml --code . --follow
"""

import argparse
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ampfleet.train

DEFAULTS = {
    "features": 16,
    "hidden": 64,
    "classes": 2,
    "samples": 4096,
    "batch_size": 32,
    "learning_rate": 3e-3,
}


def hyperparameters() -> dict[str, Any]:
    """The defaults, with the job's over them; a name this script does not know stops it
    (a misspelt one would otherwise be a silent default)."""
    given = json.loads(os.environ.get("AMPFLEET_HYPERPARAMETERS") or "{}")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise SystemExit(f"unknown hyperparameters {unknown}; this script knows {list(DEFAULTS)}")
    return {**DEFAULTS, **given}


def made_up_data(hp: dict[str, Any]) -> TensorDataset:
    """The same points on every rank: a fixed generator, not the rank's seed."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, hp["classes"], (hp["samples"],), generator=generator)
    centres = torch.randn(hp["classes"], hp["features"], generator=generator) * 0.5
    noise = torch.randn(hp["samples"], hp["features"], generator=generator)
    return TensorDataset(centres[labels] + noise, labels)


def batches(loader: DataLoader[Any], sampler: DistributedSampler[Any], after: int) -> Iterator[Any]:
    """Pass after pass over the data, from batch `after` on: the data position is the
    script's, so a resumed attempt goes on where its checkpoint was taken."""
    seen = 0
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        for batch in loader:
            seen += 1
            if seen > after:
                yield batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--steps", type=int, default=int(os.environ.get("AMPFLEET_MAX_STEPS") or 200)
    )
    args = parser.parse_args()
    hp = hyperparameters()

    # Instead of init_process_group: joins the group (NCCL on GPUs, gloo on CPUs) and picks
    # this rank's device, as the job's spec says.
    session = ampfleet.train.init()
    torch.manual_seed(0)

    data = made_up_data(hp)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=hp["batch_size"], sampler=sampler)
    model: nn.Module = nn.Sequential(
        nn.Linear(hp["features"], hp["hidden"]), nn.ReLU(), nn.Linear(hp["hidden"], hp["classes"])
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp["learning_rate"])
    # Instead of DDP(model): the job's parallelism, precision and AllReduce dtype.
    model, optimizer = session.prepare(model, optimizer, batch_size=hp["batch_size"])
    state = {"model": model, "optimizer": optimizer}
    step = session.restore(state)  # the latest checkpoint's step; 0 on a first attempt

    for batch in batches(loader, sampler, after=step):
        x, y = (tensor.to(session.device) for tensor in batch)
        with session.autocast():
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        session.backward(loss)
        session.step()  # the optimizer step, after the finite check and the loss scaler's
        step = session.steps_completed
        if step % 10 == 0 or step == args.steps:
            accuracy = (logits.argmax(dim=-1) == y).float().mean()
            session.report(step, {"loss": loss, "accuracy": accuracy})
        if step % 100 == 0:
            session.save(state)
        if step >= args.steps or session.should_stop():  # preempted, cancelled, out of time
            break
    session.save(state)

    # The whole model, gathered whether the job ran it with DDP or FSDP (every rank calls it).
    weights = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if session.rank == 0:
        output = session.job.output_dir / "model.pt"  # AMPFLEET_OUTPUT_DIR's
        output.parent.mkdir(parents=True, exist_ok=True)
        torch.save(weights, output)
        print(f"saved {output}")
    session.close()
    del model, optimizer, state, weights  # the DDP wrapper holds the process group
    ampfleet.train.leave_process_group()


if __name__ == "__main__":
    main()
