"""A plain PyTorch DDP training script, in the shape of PyTorch's DDP tutorial.

It runs as it is on this machine:

    torchrun --standalone --nproc-per-node 2 train.py --steps 50

and, unchanged, on an ampfleet fleet (job.yaml's `code.command`):

    ampfleet submit job.yaml --code . --follow

Under ampfleet it takes its hyperparameters from AMPFLEET_HYPERPARAMETERS (the spec's
`hyperparameters`), its number of steps from AMPFLEET_MAX_STEPS (`stop.max_steps`) and writes
the model where AMPFLEET_OUTPUT_DIR says (those files become the job's `outputs/`); without
them it uses the defaults below and ./outputs. Its data is made up here (two classes of
points around random centres), so nothing is downloaded.
"""

import argparse
import gc
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--steps", type=int, default=int(os.environ.get("AMPFLEET_MAX_STEPS") or 200)
    )
    args = parser.parse_args()
    hp = hyperparameters()

    # torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) says where to meet.
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)

    data = made_up_data(hp)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=hp["batch_size"], sampler=sampler)
    model = nn.Sequential(
        nn.Linear(hp["features"], hp["hidden"]), nn.ReLU(), nn.Linear(hp["hidden"], hp["classes"])
    ).to(device)
    model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp["learning_rate"])

    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)  # a new shuffle each pass, the same on every rank
        for batch in loader:
            x, y = (tensor.to(device) for tensor in batch)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            # ampfleet reads rank 0's "step N/T" lines as the job's progress and metrics.
            if rank == 0 and (step % 10 == 0 or step == args.steps):
                accuracy = (logits.argmax(dim=-1) == y).float().mean()
                print(f"step {step}/{args.steps} loss={loss.item():.4f} accuracy={accuracy:.3f}")
            if step == args.steps:
                break
        epoch += 1

    if rank == 0:
        output_dir = Path(os.environ.get("AMPFLEET_OUTPUT_DIR") or "outputs")
        output_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), output_dir / "model.pt")
        print(f"saved {output_dir / 'model.pt'}")
    # Leave together, with nothing left that holds the group: DDP's reference cycles keep
    # it, and freed only at interpreter exit, after the group is gone, they can abort this
    # process ("terminate called without an active exception") after a run that succeeded;
    # a rank that tears down while a peer still sends can too.
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
