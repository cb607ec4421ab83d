"""The embedded broker's transport: kombu's filesystem transport, with every message file
complete before it can be seen.

kombu creates a message file under its final name, then writes it. A consumer polling the
folder can take the file in between (it renames it away, then reads it) and read nothing:
the JSON error that raises ends the Celery worker ("Unrecoverable error"), and the node
is gone until it is restarted. Seen under load on a one-host fleet. Here the bytes are
written under a name no consumer takes, then renamed into place in one step.

It also lets a stopping Celery worker leave its wait for messages at once (drain_events).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

from ampfleet.core.broker_wait import drain_in_slices

PARTIAL_SUFFIX = ".part"
"""A consumer takes `<time>_<uuid>.<queue>.msg` only; this suffix hides a file being written."""


class Channel(filesystem.Channel):
    # kombu's own bases disagree on this signature; this is filesystem.Channel's.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]  # noqa: ARG002
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PARTIAL_SUFFIX
        try:
            with open(partial, "wb", buffering=0) as file:
                file.write(str_to_bytes(dumps(payload)))  # type: ignore[no-untyped-call]
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel

    # kombu's own bases disagree on this signature; this is virtual.Transport's.
    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        # Celery's loop for a transport without an event loop waits 2 s here per cycle and
        # sees a warm shutdown only between cycles: a stopping worker sat up to 2 s more on
        # this broker than on Redis. A worker asked to stop ends the wait early; any other
        # caller waits as long as it asked.
        kombus: Callable[..., None] = super().drain_events
        drain_in_slices(lambda s: kombus(connection, timeout=s), timeout, _worker_stopping)


def _worker_stopping() -> bool:
    """Whether this process is a Celery worker that a signal asked to stop (Celery's test)."""
    from celery.worker import state

    # Identity, as Celery tests it: the flag holds an exit code, and exit code 0 == False.
    flags = (state.should_stop, state.should_terminate)
    return any(flag is not None and flag is not False for flag in flags)


TRANSPORT = f"{__name__}:Transport"
"""What Celery's `broker_transport` names for a filesystem:// broker URL."""
