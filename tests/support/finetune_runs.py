"""Fine-tuning jobs on real ranks without a fleet, and their models scored the way a user
would score them: in a fresh process, with transformers and peft alone.

`run_job` writes the job file the node agent writes (the spec as the API resolves it) and
starts each rank as torchrun would, `python -m ampfleet.workers.training.entry RUN_DIR`
with its RANK and the rendezvous address, on gloo: the recipe's checks, build, the loop and
the export all run as on a node.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ampfleet.api.jobs.service import resolve
from ampfleet.core.spec import JobSpec
from ampfleet.workers.rundir import RecordReader, RunDir
from tests.support.ports import free_port

SCORE = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

def score(folder, adapter, data):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    if adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    total = tokens = 0.0
    for line in open(data, encoding="utf-8"):
        example = json.loads(line)
        prompt = tokenizer(example["prompt"])["input_ids"]
        completion = tokenizer(example["completion"], add_special_tokens=False)["input_ids"]
        completion = completion + [tokenizer.eos_token_id]
        ids = torch.tensor([prompt + completion])
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        targets = torch.tensor(completion)
        total += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
        tokens += len(completion)
    return total / tokens

data, models = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps([score(folder, adapter, data) for folder, adapter in models]))
"""


def merged_dtype(folder: Path) -> str:
    """The dtype every floating-point tensor of the folder's model.safetensors is stored in,
    read from its header as safetensors writes it."""
    raw = (folder / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    (dtype,) = {t["dtype"] for name, t in header.items() if name != "__metadata__"}
    return str(dtype)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dataset_input(path: Path, name: str) -> dict[str, Any]:
    """A single-file input as the API resolves an uploaded dataset."""
    return {
        "dataset": f"dts_{name}",
        "name": name,
        "version": 1,
        "sha256": sha256_of(path),
        "filename": path.name,
    }


def run_job(
    root: Path,
    spec: dict[str, Any],
    inputs: dict[str, Path],
    pythonpath: str,
    world_size: int = 2,
) -> RunDir:
    """Every rank of the job to its exit; the run folder (records, logs, export)."""
    resolved = resolve(JobSpec.model_validate(spec))
    resolved["inputs"] = {
        name: {"path": str(path)} if path.is_dir() else dataset_input(path, name)
        for name, path in inputs.items()
    }
    run_dir = RunDir.for_attempt(root / "runs", "job_finetune", 1, 0)
    run_dir.path.mkdir(parents=True)
    job = {
        "job_id": "job_finetune",
        "attempt": 1,
        "spec": resolved,
        "checkpoint_dir": str(root / "checkpoints"),
        "process_group_timeout_s": 120,
        "metrics_flush_s": 0.0,
        "inputs": {name: str(path) for name, path in inputs.items()},
        "node": "node-a",
    }
    run_dir.job_file.write_text(json.dumps(job))
    address = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "ampfleet.workers.training.entry", str(run_dir.path)],
            env={
                **os.environ,
                **address,
                "PYTHONPATH": pythonpath,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size),
            },
        )
        for rank in range(world_size)
    ]
    for rank in ranks:
        rank.wait(timeout=600)
    return run_dir


def records(run_dir: RunDir) -> list[dict[str, Any]]:
    reader = RecordReader(run_dir.events_file)
    found = reader.read_new()
    assert reader.rejected == [], reader.rejected
    return found


def logs(run_dir: RunDir) -> str:
    return "".join(p.read_text()[-3000:] for p in sorted(run_dir.logs_dir.glob("*")))


def scored(data: Path, models: list[tuple[Path, Path | None]]) -> list[float]:
    """Mean cross-entropy per completion token of `data` under each (model folder, peft
    adapter on it or None), in bf16 autocast as the job scores, in one new process that
    imports transformers and peft, nothing of ampfleet."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    named = json.dumps([[str(folder), str(adapter or "")] for folder, adapter in models])
    done = subprocess.run(
        [sys.executable, "-c", SCORE, str(data), named],
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=data.parent,
    )
    return [float(v) for v in json.loads(done.stdout.strip().splitlines()[-1])]


CLASSIFY = """
import csv, json, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

folder, data = sys.argv[1], sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
if data.endswith(".csv"):
    rows = list(csv.DictReader(open(data, encoding="utf-8", newline="")))
else:
    rows = [json.loads(line) for line in open(data, encoding="utf-8")]
total = correct = 0.0
for row in rows:
    ids = torch.tensor([tokenizer(row["text"])["input_ids"]])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits[0].float()
    target = model.config.label2id[str(row["label"])]
    total += float(torch.nn.functional.cross_entropy(logits[None], torch.tensor([target])))
    correct += int(logits.argmax()) == target
print(json.dumps({"loss": total / len(rows), "accuracy": correct / len(rows),
                  "id2label": model.config.id2label, "examples": len(rows)}))
"""


def classified(folder: Path, data: Path) -> dict[str, Any]:
    """`data` (CSV or JSONL text + label) classified by the model folder, one example at a
    time in bf16 autocast, in a new process that imports transformers, nothing of ampfleet:
    mean cross-entropy, accuracy, the config's id2label."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", CLASSIFY, str(folder), str(data)],
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=data.parent,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
