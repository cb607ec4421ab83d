"""The recipes resource, and admission sizing a job's ranks against the nodes' memory
(in-process ASGI client, real databases)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import Node
from tests.support.factories import add_node, job_spec, row_counts

# 12 layers of width 4096: about 2.4e9 parameters, 39 GB of model states per rank.
LARGE_GPT = {"d_model": 4096, "n_layers": 12, "n_heads": 32}


def register_cpu_node(*, slots: int, memory_mb: int | None, node_id: str = "node-m") -> None:
    add_node(
        node_id, slots, accelerator="cpu", gpu_model=None, gpu_memory_mb=None, memory_mb=memory_mb
    )


def test_recipes_list_each_installed_recipe_with_its_hyperparameter_schema(
    client: TestClient,
) -> None:
    response = client.get("/v1/recipes")
    assert response.status_code == 200, response.text
    recipes = {r["name"]: r for r in response.json()["items"]}
    assert {"digits", "charlm", "gpt-bench"} <= set(recipes)
    gpt = recipes["gpt-bench"]
    sequences = gpt["hyperparameters"]["properties"]["num_sequences"]
    assert (sequences["default"], sequences["minimum"], sequences["maximum"]) == (
        100_000,
        16,
        10_000_000,
    )
    assert gpt["metrics"] == {"val_loss": "min", "val_perplexity": "min"}
    assert gpt["default_parameters"] == 23_147_520
    assert gpt["default_rank_memory_mb"] > gpt["default_parameters"] * 16 // 2**20
    assert recipes["digits"]["metrics"]["val_accuracy"] == "max"


def test_one_recipe_by_name_and_an_unknown_one_is_404_in_the_envelope(
    client: TestClient,
) -> None:
    digits = client.get("/v1/recipes/digits")
    assert digits.status_code == 200
    assert digits.json()["hyperparameters"]["properties"]["hidden"]["maximum"] == 4096
    unknown = client.get("/v1/recipes/no-such-recipe")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert "no-such-recipe" in unknown.json()["error"]["message"]


def test_recipe_routes_have_stable_operation_ids(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert paths["/v1/recipes"]["get"]["operationId"] == "listRecipes"
    assert paths["/v1/recipes/{name}"]["get"]["operationId"] == "getRecipe"


def test_hyperparameters_that_size_memory_are_bounded(client: TestClient) -> None:
    for hyperparameters, field in (
        ({"num_sequences": 10**9}, "hyperparameters.num_sequences"),
        ({"d_model": 100, "n_heads": 8}, "hyperparameters"),
    ):
        response = client.post(
            "/v1/jobs", json=job_spec(recipe="gpt-bench", hyperparameters=hyperparameters)
        )
        assert response.status_code == 422, response.text
        assert field in {d["field"] for d in response.json()["error"]["details"]}


def test_a_model_that_cannot_fit_any_matching_node_is_refused_with_its_estimate(
    client: TestClient,
) -> None:
    register_cpu_node(slots=2, memory_mb=16_000)
    before = row_counts()
    response = client.post("/v1/jobs", json=job_spec(recipe="gpt-bench", hyperparameters=LARGE_GPT))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["details"][0]["field"] == "hyperparameters"
    assert "16 bytes" in error["message"]
    assert "8,000 MB per slot" in error["message"]
    assert row_counts() == before
    # The default model fits the 8 GB share of each slot.
    fits = client.post("/v1/jobs", json=job_spec(recipe="gpt-bench"))
    assert fits.status_code == 202, fits.text


def test_the_largest_matching_node_decides_and_unknown_memory_refuses_nothing(
    client: TestClient,
) -> None:
    register_cpu_node(slots=2, memory_mb=None, node_id="node-unknown")
    spec = job_spec(recipe="gpt-bench", hyperparameters=LARGE_GPT)
    assert client.post("/v1/jobs", json=spec).status_code == 202
    register_cpu_node(slots=1, memory_mb=1_000, node_id="node-small")
    register_cpu_node(slots=1, memory_mb=200_000, node_id="node-large")
    assert client.post("/v1/jobs", json=spec).status_code == 202
    # Only the small node matches this selector: the large one cannot host the job.
    with session_scope() as session:
        node = session.get(Node, "node-small")
        assert node is not None
        node.labels = {"pool": "small"}
    small_only = {**spec, "resources": {"procs": 1, "selector": {"pool": "small"}}}
    response = client.post("/v1/jobs", json=small_only)
    assert response.status_code == 422, response.text
    assert "1,000 MB per slot" in response.json()["error"]["message"]


def test_fsdp_shards_the_model_states_over_every_rank(client: TestClient) -> None:
    register_cpu_node(slots=8, memory_mb=8 * 16_000)
    resources = {"nodes": 1, "procs_per_node": 8}
    spec = job_spec(recipe="gpt-bench", hyperparameters=LARGE_GPT, resources=resources)
    ddp = client.post("/v1/jobs", json={**spec, "parallelism": {"strategy": "ddp"}})
    assert ddp.status_code == 422, ddp.text
    assert "DDP: a whole replica" in ddp.json()["error"]["message"]
    fsdp = client.post("/v1/jobs", json={**spec, "parallelism": {"strategy": "fsdp"}})
    assert fsdp.status_code == 202, fsdp.text
