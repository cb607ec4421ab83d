"""Process-wide logging: one line per record, as JSON (the default) or text, naming the
process role and, inside an HTTP request, the request id; inside a span of a trace
(core/tracing.py), its trace and span ids. Python's warnings (Celery's among them) are
records too, so a JSON process writes no other kind of line."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
# uvicorn's `color_message` repeats the message with terminal colour codes, for its own
# formatter: in a JSON line it would only be noise.
_LEFT_OUT = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


def _span_ids() -> Callable[[], dict[str, str]]:
    """What names the current span, where OpenTelemetry is installed (the server extras;
    the client has none and never configures logging)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return dict

    def current() -> dict[str, str]:
        span = trace.get_current_span().get_span_context()
        if not span.is_valid:
            return {}
        return {"trace_id": f"{span.trace_id:032x}", "span_id": f"{span.span_id:016x}"}

    return current


class JsonFormatter(logging.Formatter):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role
        self.span_ids = _span_ids()

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "role": self.role,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if (current := request_id.get()) is not None:
            entry["request_id"] = current
        entry.update(self.span_ids())
        # Structured fields passed as `extra=` become top-level keys.
        entry.update({k: v for k, v in record.__dict__.items() if k not in _LEFT_OUT})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(role: str, level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(role))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s {role:<9} %(levelname)-7s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)
    for noisy in ("celery.worker.consumer", "celery.apps.worker", "amqp"):
        logging.getLogger(noisy).setLevel("WARNING")
    # kombu warns on every embedded-broker connection that it has no host name.
    logging.getLogger("kombu").setLevel("ERROR")
