"""Property-based fuzzing of every operation in the live OpenAPI document (schemathesis):
no 5xx, every response matches its documented schema, status codes and content type.
A few examples per operation here; the long tier (`make test-all`, marked slow) runs 200."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from tests.support.env import environment


@pytest.fixture
def unlimited() -> Iterator[None]:
    with environment(
        {
            "AMPFLEET_RATE_LIMIT_PER_S": "100000",
            "AMPFLEET_RATE_LIMIT_BURST": "100000",
            "AMPFLEET_ENVIRONMENT": "test",
            "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        }
    ):
        yield


# What the API promises for any input: no 5xx; status codes, content types and bodies as
# documented. (Not "every schema-valid request is accepted": a job naming a recipe that is
# not installed, or a cursor this API never issued, is schema-valid and still refused 422.)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.negative_data_rejection,
]


def fuzz(app: FastAPI, key: str, examples: int) -> list[str]:
    """Every operation, `examples` generated cases each; returns what failed, per operation."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {key}"}
    failures = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            check()
        except BaseException as exc:  # every operation's failure, not just the first one
            failures.append(f"{operation.label}: {str(exc)[:2000]}")
    return failures


def test_every_operation_quick(backend: str, unlimited: None, app: FastAPI, make_key) -> None:
    assert fuzz(app, make_key(), examples=10) == []


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_operation_deep(backend: str, unlimited: None, app: FastAPI, make_key) -> None:
    assert fuzz(app, make_key(), examples=200) == []
