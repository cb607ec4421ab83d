"""Profiles on demand, as flows (see protocol.py) shared by both clients: ask a running job's
ranks to capture a few steps with torch.profiler, wait until the traces are stored, and
download them with the summary (downloads.py: resumable, verified)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote

from pydantic import TypeAdapter

from ampfleet.core.profile_states import ProfileState
from ampfleet.sdk.downloads import ProgressCallback, download_names
from ampfleet.sdk.errors import Conflict, ProfileTimeout
from ampfleet.sdk.flows import Operations, poll_until
from ampfleet.sdk.models import Profile
from ampfleet.sdk.protocol import Flow, Request, query

_profiles = TypeAdapter(list[Profile])


def _path(job_id: str, suffix: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"


def request_profile(
    ops: Operations, job_id: str, steps: int, ranks: Iterable[int] | None, record_shapes: bool
) -> Flow[Profile]:
    body = {
        "steps": steps,
        "ranks": None if ranks is None else list(ranks),
        "record_shapes": record_shapes,
    }
    response = yield from ops.send(Request("POST", _path(job_id, "/profile"), json=body))
    return Profile.model_validate_json(response.content)


def get_profile(ops: Operations, job_id: str, profile_id: str | None) -> Flow[Profile]:
    """One profile of the job; None: its latest."""
    suffix = "/profile" if profile_id is None else f"/profiles/{quote(profile_id, safe='')}"
    response = yield from ops.send(Request("GET", _path(job_id, suffix)))
    return Profile.model_validate_json(response.content)


def list_profiles(ops: Operations, job_id: str, limit: int) -> Flow[list[Profile]]:
    response = yield from ops.send(Request("GET", _path(job_id, "/profiles"), query(limit=limit)))
    return _profiles.validate_python(response.json()["items"])


def cancel_profile(ops: Operations, job_id: str) -> Flow[Profile]:
    response = yield from ops.send(Request("DELETE", _path(job_id, "/profile")))
    return Profile.model_validate_json(response.content)


def wait_profile(
    ops: Operations,
    job_id: str,
    profile_id: str,
    *,
    timeout: float | None,
    poll: float,
    max_poll: float,
    on_poll: Callable[[Profile], None] | None,
) -> Flow[Profile]:
    """Polls until the profile is done, failed or cancelled."""
    return (
        yield from poll_until(
            lambda: get_profile(ops, job_id, profile_id),
            lambda profile: profile.is_final,
            ProfileTimeout,
            timeout=timeout,
            poll=poll,
            max_poll=max_poll,
            on_poll=on_poll,
        )
    )


def download_profile(
    ops: Operations, job_id: str, profile_id: str, to: Path, progress: ProgressCallback | None
) -> Flow[list[Path]]:
    """A done profile's traces and summary into `to`, as `to/profiles/<id>/...`."""
    profile = yield from get_profile(ops, job_id, profile_id)
    if profile.state != ProfileState.DONE:
        raise Conflict(
            409,
            "conflict",
            f"profile {profile_id} is {profile.state}"
            + (f" ({profile.reason})" if profile.reason else "")
            + ": only a done profile has files to download",
        )
    names = [artifact.name for artifact in profile.artifacts]
    return (yield from download_names(ops, job_id, names, to, progress))
