"""A job's live stream: state changes and other events, progress, and metrics as they land.

Each frame's id is `<last event id>:<last metric id>`; a client that reconnects with that
as `Last-Event-ID` gets everything after it and nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi.responses import StreamingResponse
from sqlalchemy import select

from ampfleet.api.auth import Principal
from ampfleet.api.jobs import repository, service
from ampfleet.api.jobs.schemas import EventOut, QueueInfo
from ampfleet.api.streaming import frame, open_stream, parse_cursor
from ampfleet.core.db import get_read_sessionmaker
from ampfleet.core.models import Job, Metric
from ampfleet.core.states import JobState

BATCH = 2000


@dataclass
class Cursor:
    event_id: int = 0
    metric_id: int = 0

    @classmethod
    def parse(cls, value: str | None) -> Cursor:
        parsed = parse_cursor(value, "event id", "metric id")
        return cls(*parsed) if parsed else cls()

    def __str__(self) -> str:
        return f"{self.event_id}:{self.metric_id}"


class JobStream:
    def __init__(self, job_id: str, cursor: Cursor) -> None:
        self.job_id = job_id
        self.cursor = cursor
        self.progress: tuple[int, int | None, str, QueueInfo | None] | None = None

    def step(self) -> tuple[list[bytes], bool]:
        with get_read_sessionmaker()() as session:
            job = session.get(Job, self.job_id)
            if job is None:
                return [], True
            frames = []
            events = repository.events(session, self.job_id, self.cursor.event_id, BATCH)
            for event in events:
                self.cursor.event_id = event.id
                kind = "state" if event.kind == "transition" else "event"
                frames.append(
                    frame(
                        kind,
                        EventOut.model_validate(event, from_attributes=True).model_dump(
                            mode="json"
                        ),
                        str(self.cursor),
                    )
                )
            metrics = session.execute(
                select(Metric.id, Metric.step, Metric.name, Metric.value)
                .where(Metric.job_id == self.job_id, Metric.id > self.cursor.metric_id)
                .order_by(Metric.id)
                .limit(BATCH)
            ).all()
            if metrics:
                self.cursor.metric_id = metrics[-1].id
                points = [{"step": m.step, "name": m.name, "value": m.value} for m in metrics]
                frames.append(frame("metrics", {"points": points}, str(self.cursor)))
            queue = service.queue_info(job)
            # The ETA moves with the clock, so it rides along with a change instead of being one.
            progress = (job.step, job.total_steps, job.state, queue)
            if progress != self.progress:
                self.progress = progress
                # What GET /v1/jobs/{id} answers, so a follower need not poll it.
                progress_now = service.progress_of(job, datetime.now(UTC))
                frames.append(
                    frame(
                        "progress",
                        {
                            "state": job.state,
                            "step": job.step,
                            "total_steps": job.total_steps,
                            "latest_metrics": job.latest_metrics,
                            "eta_seconds": progress_now.eta_seconds,
                            "eta_confidence": progress_now.eta_confidence,
                            "steps_per_s": progress_now.steps_per_s,
                            "queue": queue.model_dump(mode="json") if queue else None,
                        },
                        str(self.cursor),
                    )
                )
            # Over once the job is terminal and a poll found nothing new left to send.
            finished = JobState(job.state).is_terminal() and not events and not metrics
            if finished:
                frames.append(frame("end", {"state": job.state}, str(self.cursor)))
            return frames, finished


def stream_job(job_id: str, last_event_id: str | None, principal: Principal) -> StreamingResponse:
    return open_stream(principal, JobStream(job_id, Cursor.parse(last_event_id)).step)
