"""The node agent's side of profiles on demand: each pass, every running attempt's run folder
gets its job's open profile as `profile-request.json` (written when one opens, removed when
it closes: uploading, done, failed or cancelled), and rank 0 takes it from there
(profile_request.py). What the ranks report back comes in through their records (ingest.py)
and their files through the uploader, like any artifact."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from sqlalchemy.orm import Session

from ampfleet.core import profiles
from ampfleet.workers import beneath
from ampfleet.workers.profile_request import ProfileRequest, request_file
from ampfleet.workers.rundir import RunDir

log = logging.getLogger(__name__)


def hand_over_profiles(session: Session, attempts: Mapping[tuple[str, int], RunDir]) -> None:
    """`attempts`: the (job id, attempt) of each attempt whose ranks run here, and its folder."""
    wanted = profiles.requests_for(session, attempts.keys())
    for (job_id, _), run_dir in attempts.items():
        row = wanted.get(job_id)
        request = None
        if row is not None:
            ranks = None if row.ranks is None else tuple(row.ranks)
            request = ProfileRequest(row.id, row.steps, ranks, row.record_shapes)
        hand_over(run_dir, request)


def hand_over(run_dir: RunDir, request: ProfileRequest | None) -> None:
    """The file holds `request`, or is gone when there is none. Written under a temporary
    name and renamed, so a rank never reads half of it; left alone when it says so already."""
    path = request_file(run_dir)
    if request is None:
        with contextlib.suppress(OSError):  # gone already; else rank 0 took it once, no more
            path.unlink()  # unlink never follows a link: a planted one is what goes
        return
    text = request.to_json()
    with contextlib.suppress(OSError):  # the ranks' folder: read beneath it, bounded
        if beneath.read_bytes(run_dir.path, path.name, 0, len(text) + 1) == text.encode():
            return
    try:
        beneath.write_atomic(run_dir.path, path.name, text.encode())
    except OSError as exc:  # the next pass tries again; the records go on meanwhile
        log.warning("could not hand profile %s to %s: %s", request.id, run_dir.path, exc)
