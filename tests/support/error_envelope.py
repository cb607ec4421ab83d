"""The API's one error envelope as tests check it: `assert_envelope` asserts that a body is
one (the expected code, a message, a list of details, no traceback) and returns its `error`;
`fields` names the fields that its details point at."""

from __future__ import annotations

import json


def assert_envelope(response_json: dict, code: str) -> dict:
    assert set(response_json) == {"error"}
    error = response_json["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], list)
    assert "Traceback" not in json.dumps(response_json)
    return error


def fields(error: dict) -> set[str]:
    return {d["field"] for d in error["details"]}
