"""The files of a new script-mode project, as `ampfleet init --script NAME` writes them.

`train.py` is a plain DDP script that runs under a bare torchrun as well as in a job
(`code.command`); `train_session.py` is the same script with `ampfleet.train` added. Both are
kept in script/ beside this module as the runnable files they are (linted, and run by the
tests), and copied as they are.
"""

from __future__ import annotations

from pathlib import Path

SCRIPTS = Path(__file__).parent / "script"

JOB = """# The plain script, as it is. Submit with: ampfleet submit job.yaml --code . --follow
name: {name}
code:
  command: [python, train.py]
hyperparameters:
  hidden: 64
resources:
  procs_per_node: 2
stop:
  max_steps: 200  # the script's --steps (AMPFLEET_MAX_STEPS)
"""

JOB_SESSION = """# The script with ampfleet.train: the job's precision, AllReduce dtype and
# checkpoints apply to it. Submit with: ampfleet submit job-session.yaml --code . --follow
name: {name}-session
code:
  command: [python, train_session.py]
hyperparameters:
  hidden: 64
resources:
  procs_per_node: 2
precision: bf16
allreduce_dtype: bf16
stop:
  max_steps: 200  # the session's total: should_stop() turns true there
checkpoint:
  keep_last: 2
"""

README = """# {name}

A PyTorch DDP training script for [ampfleet](https://github.com/)'s script mode, written
by `ampfleet init --script {name}`. Its data is made up by the script (no downloads).

- `train.py`: a plain DDP script (the shape of PyTorch's DDP tutorial) that knows nothing
  of ampfleet beyond reading three environment variables when they are set.
- `train_session.py`: the same script with ampfleet's rank-side API, `ampfleet.train`.
- `job.yaml`, `job-session.yaml`: the job specs that run each (`code.command`).

## The plain script

It runs as it is on this machine, on 2 CPU ranks (or GPUs, with NCCL):

    torchrun --standalone --nproc-per-node 2 train.py --steps 50

and unchanged in a job, which gives it the same torchrun environment on every rank:

    ampfleet run-local job.yaml --code . --procs 2    # here, as a node would run it
    ampfleet submit job.yaml --code . --follow        # on the fleet
    ampfleet download JOB_ID --name outputs/model.pt -o model/

Its loop is the tutorial's:

```python
dist.init_process_group("nccl" if use_cuda else "gloo")
model = DDP(model, device_ids=[local_rank] if use_cuda else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=hp["learning_rate"])
logits = model(x)
loss = F.cross_entropy(logits, y)
optimizer.zero_grad()
loss.backward()
optimizer.step()
print(f"step {{step}}/{{args.steps}} loss={{loss.item():.4f}} accuracy={{accuracy:.3f}}")
```

What it takes from the job, each with a fallback when it runs on its own:

| variable | what | on its own |
|---|---|---|
| `AMPFLEET_HYPERPARAMETERS` | the spec's `hyperparameters` (JSON), over the defaults | defaults |
| `AMPFLEET_MAX_STEPS` | the spec's `stop.max_steps`: the default of `--steps` | 200 |
| `AMPFLEET_OUTPUT_DIR` | where rank 0 saves `model.pt` (the job's `outputs/`) | `./outputs` |

The platform reads rank 0's `step N/T loss=...` lines as the job's progress and metrics.
The script owns its precision and reduction (fp32 here), so the job's `precision` does
not apply to it.

## The same with `ampfleet.train`

```python
session = ampfleet.train.init()
model, optimizer = session.prepare(model, optimizer, batch_size=hp["batch_size"])
step = session.restore(state)  # the latest checkpoint's step; 0 on a first attempt
with session.autocast():
session.backward(loss)
session.step()  # the optimizer step, after the finite check and the loss scaler's
session.report(step, {{"loss": loss, "accuracy": accuracy}})
session.save(state)
if step >= args.steps or session.should_stop():  # preempted, cancelled, out of time
session.close()
```

`init` replaces `init_process_group`, `prepare` replaces `DDP(...)`, and the session's
`backward` and `step` replace the script's. The job's `precision` and `allreduce_dtype`
(bf16 in `job-session.yaml`) now apply, with fp32 master weights; `report` gives the job
its metrics with the platform's own beside them (step time by phase, AllReduce bytes,
gradient norm); `save` and `restore` checkpoint into the job's folder, which a restarted
attempt resumes from, on any node. It runs inside a job:

    ampfleet run-local job-session.yaml --code . --procs 2
    ampfleet submit job-session.yaml --code . --follow

The folder is packed without `.git`, virtualenvs, caches and what `.gitignore` and
`.ampignore` leave out.
"""

AMPIGNORE = "# Left out of the code bundle (gitignore syntax): a local run's model.\noutputs/\n"


def write_script_project(folder: Path, name: str) -> list[Path]:
    """Writes the project into `folder` (which must not exist yet); the files written."""
    files = {
        "train.py": (SCRIPTS / "train.py").read_text(),
        "train_session.py": (SCRIPTS / "train_session.py").read_text(),
        "job.yaml": JOB.format(name=name),
        "job-session.yaml": JOB_SESSION.format(name=name),
        "README.md": README.format(name=name),
        ".ampignore": AMPIGNORE,
    }
    folder.mkdir(parents=True)
    written = []
    for relative, text in files.items():
        path = folder / relative
        path.write_text(text)
        written.append(path)
    return written
