"""Rules of the logs resource: where a read starts (after an id, the tail, a stream's
`Last-Event-ID`), a page of lines, and the follower that feeds a live stream."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ampfleet.api.logs import repository
from ampfleet.api.logs.repository import Filter
from ampfleet.api.logs.schemas import LogLineOut, LogPage
from ampfleet.api.streaming import frame, parse_cursor
from ampfleet.core.db import get_read_sessionmaker
from ampfleet.core.models import Job
from ampfleet.core.states import JobState

BATCH = 1000  # lines in a page at most, and in one stream event


def start_after(
    session: Session, conditions: Filter, *, after: int, tail: int | None, last_event_id: str | None
) -> int:
    """The id after which to read: a resumed stream's own cursor first, then the tail."""
    if (resumed := parse_cursor(last_event_id, "line id")) is not None:
        (after,) = resumed
    elif tail is not None:
        after = repository.id_before_tail(session, conditions, tail)
    return after


def page(session: Session, job: Job, conditions: Filter, after: int, limit: int) -> LogPage:
    lines = repository.lines_after(session, conditions, after, limit)
    return LogPage(
        items=[LogLineOut.model_validate(line, from_attributes=True) for line in lines],
        next_after=lines[-1].id if len(lines) == limit else None,
        dropped_lines=job.log_lines_dropped,
    )


class Follower:
    """One poll of a live stream at a time: the lines since the last, then `end` once the
    job is over and nothing is left to send. Each poll reads with a session of its own."""

    def __init__(self, job_id: str, conditions: Filter, after: int) -> None:
        self.job_id, self.conditions, self.after = job_id, conditions, after

    def step(self) -> tuple[list[bytes], bool]:
        with get_read_sessionmaker()() as session:
            state = repository.job_state(session, self.job_id)
            lines = repository.lines_after(session, self.conditions, self.after, BATCH)
        frames = []
        if lines:
            self.after = lines[-1].id
            items = [
                LogLineOut.model_validate(line, from_attributes=True).model_dump(mode="json")
                for line in lines
            ]
            frames.append(frame("logs", {"lines": items}, str(self.after)))
        finished = state is None or (JobState(state).is_terminal() and not lines)
        if finished:
            frames.append(frame("end", {"state": state}, str(self.after)))
        return frames, finished
