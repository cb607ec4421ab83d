"""Where is my model? End to end on both backends (PostgreSQL + Redis with the S3 store on
SeaweedFS; the embedded default with the local store): a digits job on two ranks SUCCEEDS,
the SDK downloads `model.safetensors`, its manifest and a file the recipe wrote, and the
downloaded weights score exactly the `val_accuracy` the job reported.

"Exactly" holds because the test scores as the loop's `Trainer.evaluate` does: the manifest's
autocast dtype, the same validation samples (the split file the recipe wrote), each rank's
shard as `DistributedSampler(shuffle=False)` cuts it, the recipe's batch size, per-rank sums
in fp32 added over ranks, then the recipe's `eval_finalize`. Both ranks held the same
weights (DDP's gradients are bit-identical on every rank), so rank 0's export stands for
both.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ampfleet.core.recipes import get_recipe
from ampfleet.sdk import Client
from ampfleet.workers.training.precision import autocast
from ampfleet.workers.training.recipes.digits import VAL_SPLIT_FILE
from ampfleet.workers.training.task import RecipeContext, TrainingTask
from tests.conftest import S3_TEST_BUCKET
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, FleetFactory
from tests.support.seaweedfs import S3Server

pytestmark = pytest.mark.e2e
CPU = torch.device("cpu")


@pytest.fixture(params=["postgres+redis+s3", "embedded+local"])
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    if request.param == "embedded+local":
        return make_fleet("embedded")  # the store's default: files under the data dir
    seaweedfs: S3Server = request.getfixturevalue("seaweedfs")
    store = seaweedfs.environment(S3_TEST_BUCKET, prefix=f"e2e{uuid.uuid4().hex[:10]}")
    return make_fleet("postgres+redis", extra_env=store)


def validation_set(split_file: Path) -> TensorDataset:
    """The validation samples the split file names, as the recipe builds them."""
    from sklearn.datasets import load_digits

    split = json.loads(split_file.read_text())
    assert split["source"] == "sklearn.datasets.load_digits"
    digits = load_digits()
    indices = split["validation"]
    features = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    return TensorDataset(features[indices], torch.tensor(digits.target, dtype=torch.long)[indices])


def rescore(
    task: TrainingTask, val: TensorDataset, world_size: int, precision: str
) -> dict[str, float]:
    """`Trainer.evaluate`, rank by rank in one process, with the all-reduce as a sum."""
    task.model.eval()
    per_rank: list[dict[str, torch.Tensor]] = []
    with torch.no_grad():
        for rank in range(world_size):
            sampler: DistributedSampler[Any] = DistributedSampler(
                val, num_replicas=world_size, rank=rank, shuffle=False
            )
            loader = DataLoader(val, batch_size=task.batch_size, sampler=sampler)
            sums: dict[str, torch.Tensor] = {}
            for batch in loader:
                with autocast(precision, CPU):
                    scored = task.eval_step(task.model, batch)
                for name, value in scored.items():
                    sums[name] = sums.get(name, torch.zeros(())) + value.float()
            per_rank.append(sums)
    names = sorted(per_rank[0])
    total = torch.stack([torch.stack([s[n] for n in names]) for s in per_rank]).sum(dim=0)
    return task.eval_finalize(dict(zip(names, total.tolist(), strict=True)))


def test_the_downloaded_model_scores_the_reported_val_accuracy(
    fleet: Fleet, tmp_path: Path
) -> None:
    spec = job_spec(
        name="take-it-away",
        stop={"max_steps": 150},
        log_every_steps=50,
        hyperparameters={"hidden": 64, "save_split": True},
    )
    job_id = fleet.submit(spec)["id"]
    fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=240)

    with Client(fleet.base_url, fleet.admin_key) as client:
        job = client.get(job_id)
        listed = {a.name: a for a in client.artifacts(job_id)}
        weights_path, manifest_path = client.download(job_id, "model", to=tmp_path)
        [split_file] = client.download(job_id, f"outputs/{VAL_SPLIT_FILE}", to=tmp_path)

    assert {"model.safetensors", "manifest.json", f"outputs/{VAL_SPLIT_FILE}"} <= set(listed)
    assert listed[f"outputs/{VAL_SPLIT_FILE}"].kind == "output"
    assert split_file == tmp_path / "outputs" / VAL_SPLIT_FILE
    manifest = json.loads(manifest_path.read_text())
    digest = hashlib.sha256(weights_path.read_bytes()).hexdigest()
    assert manifest["files"]["model.safetensors"]["sha256"] == digest
    assert listed["model.safetensors"].sha256 == digest
    assert manifest["outputs"][f"outputs/{VAL_SPLIT_FILE}"]["size"] == split_file.stat().st_size
    assert manifest["precision"]["effective"] == "bf16"
    assert manifest["allreduce_dtype"]["effective"] == "bf16"
    assert manifest["world_size"] == 2
    assert manifest["checkpoint"]["step"] == 150
    with safe_open(str(weights_path), "pt") as opened:
        assert opened.metadata()["dtype"] == "float32"

    # The recipe's model, the downloaded fp32 master weights in it (strictly: every key).
    recipe = get_recipe(manifest["recipe"])
    hyperparameters = recipe.hyperparameters.model_validate(manifest["hyperparameters"])
    context = RecipeContext(rank=0, world_size=1, device=CPU, seed=manifest["spec"]["seed"])
    task = recipe.build(hyperparameters, context)
    task.model.load_state_dict(load_file(str(weights_path)))

    scored = rescore(
        task,
        validation_set(split_file),
        manifest["world_size"],
        manifest["precision"]["effective"],
    )
    assert scored["val_accuracy"] == job.latest_metrics["val_accuracy"]
    assert scored["val_accuracy"] == manifest["metrics"]["val_accuracy"]
    assert_no_store_secret_leaked(fleet, job_id, manifest_path)


def assert_no_store_secret_leaked(fleet: Fleet, job_id: str, manifest: Path) -> None:
    """The S3 store's secret key is in no answer of the API, in no process's log and in no
    file of the fleet (run folders, rank logs, checkpoints), nor in the manifest."""
    secret = fleet.env.get("AMPFLEET_S3_SECRET_ACCESS_KEY")
    if not secret:
        return  # the embedded fleet's local store has no credentials
    routes = ["", "/artifacts", "/checkpoints", "/events", "/logs", "/metrics"]
    answers = {route: fleet.http.get(f"/v1/jobs/{job_id}{route}").text for route in routes}
    answers["/v1/nodes"] = fleet.http.get("/v1/nodes").text
    answers["/metrics"] = fleet.http.get("/metrics").text
    assert [route for route, text in answers.items() if secret in text] == []
    assert secret not in manifest.read_text()
    holding = [
        path.relative_to(fleet.root)
        for path in fleet.root.rglob("*")
        if path.is_file() and secret.encode() in path.read_bytes()
    ]
    assert holding == []
