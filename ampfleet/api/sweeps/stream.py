"""A sweep's live stream: its events as they are written (a trial started, pruned, ended;
the sweep ended) and its progress (state and trials by state) when it changes. Each frame's
id is the last event id sent; a client that reconnects with it as `Last-Event-ID` gets
everything after it and nothing twice. Over once the sweep has ended, no trial of it is still
running (a cancelled sweep's trials end after it), and a poll found nothing new."""

from __future__ import annotations

from fastapi.responses import StreamingResponse

from ampfleet.api.auth import Principal
from ampfleet.api.streaming import frame, open_stream, parse_cursor
from ampfleet.api.sweeps import repository
from ampfleet.api.sweeps.schemas import SweepEventOut
from ampfleet.core.db import get_read_sessionmaker
from ampfleet.core.models import Sweep
from ampfleet.core.sweep_spec import SweepState, TrialState

BATCH = 1000


class SweepStream:
    def __init__(self, sweep_id: str, after: int) -> None:
        self.sweep_id = sweep_id
        self.after = after
        self.progress: tuple[str, str | None, dict[str, int]] | None = None

    def step(self) -> tuple[list[bytes], bool]:
        with get_read_sessionmaker()() as session:
            sweep = session.get(Sweep, self.sweep_id)
            if sweep is None:
                return [], True
            frames = []
            events = repository.events(session, self.sweep_id, self.after, BATCH)
            for event in events:
                self.after = event.id
                out = SweepEventOut.model_validate(event, from_attributes=True)
                frames.append(frame("event", out.model_dump(mode="json"), str(self.after)))
            counts = repository.counts(session, [self.sweep_id])[self.sweep_id]
            progress = (sweep.state, sweep.reason, counts)
            if progress != self.progress:
                self.progress = progress
                state = {"state": sweep.state, "reason": sweep.reason, "counts": counts}
                frames.append(frame("progress", state, str(self.after)))
            settled = counts.get(TrialState.RUNNING, 0) == 0
            finished = SweepState(sweep.state).is_terminal() and settled and not events
            if finished:
                frames.append(frame("end", {"state": sweep.state}, str(self.after)))
            return frames, finished


def stream_sweep(
    sweep_id: str, last_event_id: str | None, principal: Principal
) -> StreamingResponse:
    parsed = parse_cursor(last_event_id, "event id")
    return open_stream(principal, SweepStream(sweep_id, parsed[0] if parsed else 0).step)
