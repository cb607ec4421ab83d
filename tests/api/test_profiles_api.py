"""Profiles on demand over HTTP, and the states core.profiles moves them through: one open
profile per job, RUNNING jobs only, write keys only, bad bodies in the envelope, cancel by
request or with the job, and a report's files listed before the profile is done."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from ampfleet.core import profiles
from ampfleet.core.artifact_names import PROFILE_KIND
from ampfleet.core.db import session_scope
from ampfleet.core.ids import new_id
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Artifact, Profile
from ampfleet.core.profile_states import MAX_STEPS
from ampfleet.core.states import JobState
from tests.conftest import KeyFactory
from tests.support.factories import insert_job


def _profile(client: TestClient, job_id: str, **body: Any) -> Any:
    return client.post(f"/v1/jobs/{job_id}/profile", json=body)


def _error(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert set(error) == {"code", "message", "details"}
    return error


def test_a_running_job_gets_one_profile_at_a_time(client: TestClient) -> None:
    job_id = insert_job(state=JobState.RUNNING, procs_per_node=2)
    first = _profile(client, job_id, steps=3, ranks=[1, 0])
    assert first.status_code == 202, first.text
    profile = first.json()
    assert profile["state"] == "requested"
    assert (profile["ranks"], profile["steps"]) == ([0, 1], 3)
    assert (profile["record_shapes"], profile["artifacts"]) == (False, [])

    second = _error(_profile(client, job_id), 409)
    assert profile["id"] in second["message"]

    assert client.get(f"/v1/jobs/{job_id}/profile").json()["id"] == profile["id"]
    cancelled = client.delete(f"/v1/jobs/{job_id}/profile")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["reason"] == "cancelled by request"
    _error(client.delete(f"/v1/jobs/{job_id}/profile"), 409)

    again = _profile(client, job_id, record_shapes=True)
    assert again.status_code == 202, again.text
    assert (again.json()["steps"], again.json()["ranks"]) == (5, None)
    listed = client.get(f"/v1/jobs/{job_id}/profiles").json()["items"]
    assert [p["id"] for p in listed] == [again.json()["id"], profile["id"]]
    one = client.get(f"/v1/jobs/{job_id}/profiles/{profile['id']}")
    assert one.json()["state"] == "cancelled"
    _error(client.get(f"/v1/jobs/{job_id}/profiles/prf_nothere"), 404)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": MAX_STEPS + 1}, "steps"),
        ({"steps": "many"}, "steps"),
        ({"ranks": []}, "ranks"),
        ({"ranks": [-1]}, "ranks.0"),
        ({"ranks": [0, 0]}, "ranks"),
        ({"ranks": [2]}, "ranks"),  # the job has 2 ranks: 0 and 1
        ({"record_shapes": "perhaps"}, "record_shapes"),
        ({"rank": [0]}, "rank"),
    ],
)
def test_bad_bodies_are_refused_in_the_envelope(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    job_id = insert_job(state=JobState.RUNNING, procs_per_node=2)
    error = _error(_profile(client, job_id, **body), 422)
    assert error["code"] == "validation_error"
    assert field in [detail["field"] for detail in error["details"]], error
    assert client.get(f"/v1/jobs/{job_id}/profiles").json()["items"] == []


def test_only_a_running_job_and_only_a_write_key(
    client: TestClient, app: FastAPI, make_key: KeyFactory
) -> None:
    queued = insert_job(state=JobState.QUEUED)
    assert "QUEUED" in _error(_profile(client, queued), 409)["message"]
    running = insert_job(state=JobState.RUNNING)
    reader = TestClient(
        app,
        raise_server_exceptions=False,
        headers={"Authorization": f"Bearer {make_key('default', 'read')}"},
    )
    assert _error(_profile(reader, running), 403)["code"] == "forbidden"
    _profile(client, running)
    assert _error(reader.delete(f"/v1/jobs/{running}/profile"), 403)["code"] == "forbidden"
    assert reader.get(f"/v1/jobs/{running}/profile").json()["state"] == "requested"
    other = TestClient(
        app,
        raise_server_exceptions=False,
        headers={"Authorization": f"Bearer {make_key('elsewhere', 'write')}"},
    )
    _error(_profile(other, running), 404)
    _error(client.get(f"/v1/jobs/{queued}/profile"), 404)  # it has none


@pytest.mark.parametrize(
    ("to", "state"), [(JobState.CANCELLING, "cancelled"), (JobState.RESTARTING, "failed")]
)
def test_a_job_leaving_running_takes_its_open_profile(
    client: TestClient, to: JobState, state: str
) -> None:
    job_id = insert_job(state=JobState.RUNNING)
    profile_id = _profile(client, job_id).json()["id"]
    with session_scope() as session:
        assert transition(
            session, job_id, to, from_states={JobState.RUNNING}, reason="test", message=""
        )
    closed = client.get(f"/v1/jobs/{job_id}/profile").json()
    assert (closed["id"], closed["state"]) == (profile_id, state)
    assert closed["reason"]
    assert closed["finished_at"]


def _list(job_id: str, name: str) -> None:
    with session_scope() as session:
        session.add(
            Artifact(
                id=new_id("art"),
                job_id=job_id,
                project="default",
                kind=PROFILE_KIND,
                name=name,
                step=None,
                attempt=0,
                size=2,
                sha256="0" * 64,
                content_type="application/json",
                details={},
            )
        )
        session.flush()
        profiles.artifact_listed(session, name)


def test_a_capture_is_done_once_every_file_is_listed(client: TestClient) -> None:
    job_id = insert_job(state=JobState.RUNNING)
    profile_id = _profile(client, job_id, steps=2).json()["id"]
    names = [f"profiles/{profile_id}/rank-{r}.trace.json" for r in (0, 1)]
    names.append(f"profiles/{profile_id}/summary.json")
    _list(job_id, names[1])  # another node's trace may be listed before the report comes
    with session_scope() as session:
        profiles.apply_report(
            session, {"profile_id": profile_id, "state": "capturing", "start_step": 11}
        )
    assert client.get(f"/v1/jobs/{job_id}/profile").json()["state"] == "capturing"
    _error(_profile(client, job_id), 409)  # still one in progress
    report = {
        "profile_id": profile_id,
        "state": "uploading",
        "start_step": 11,
        "end_step": 12,
        "artifacts": names,
        "ranks": [0, 1],
        "summary": {"steps": 2},
    }
    with session_scope() as session:
        told = profiles.apply_report(session, report)
    assert f"profiles/{profile_id}/" in (told or "")
    uploading = client.get(f"/v1/jobs/{job_id}/profile").json()
    assert uploading["state"] == "uploading"
    assert [a["listed"] for a in uploading["artifacts"]] == [False, True, False]
    assert _profile(client, job_id).status_code == 202  # the capture is over: a new one may
    _list(job_id, names[0])
    _list(job_id, names[2])
    done = client.get(f"/v1/jobs/{job_id}/profiles/{profile_id}").json()
    assert done["state"] == "done", done
    assert (done["start_step"], done["end_step"], done["summary"]) == (11, 12, {"steps": 2})
    assert all(a["listed"] and a["download_url"] for a in done["artifacts"])
    with session_scope() as session:  # a late report changes nothing
        assert profiles.apply_report(session, {**report, "state": "failed"}) is None
    assert client.get(f"/v1/jobs/{job_id}/profiles/{profile_id}").json()["state"] == "done"


def test_a_file_that_cannot_be_stored_fails_the_profile(client: TestClient) -> None:
    job_id = insert_job(state=JobState.RUNNING)
    profile_id = _profile(client, job_id).json()["id"]
    name = f"profiles/{profile_id}/summary.json"
    with session_scope() as session:
        profiles.apply_report(
            session,
            {
                "profile_id": profile_id,
                "state": "uploading",
                "start_step": 1,
                "end_step": 5,
                "artifacts": [name],
            },
        )
        profiles.upload_failed(session, name, "OSError: disk full")
    failed = client.get(f"/v1/jobs/{job_id}/profile").json()
    assert failed["state"] == "failed"
    assert "disk full" in failed["reason"]


def test_deleting_a_job_deletes_its_profiles(client: TestClient) -> None:
    job_id = insert_job(state=JobState.RUNNING)
    _profile(client, job_id)
    with session_scope() as session:
        for to, source in (
            (JobState.CANCELLING, JobState.RUNNING),
            (JobState.CANCELLED, JobState.CANCELLING),
        ):
            assert transition(session, job_id, to, from_states={source}, reason="test")
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    with session_scope() as session:
        assert session.scalars(select(Profile).where(Profile.job_id == job_id)).all() == []
