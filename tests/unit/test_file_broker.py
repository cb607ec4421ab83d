"""The embedded broker never shows a consumer a message file that is still being written:
kombu's own filesystem transport does (the file exists, empty, under its final name while
its bytes are encoded), and a consumer that takes it then reads nothing and its worker
ends. Messages still go through the folder whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import filesystem
from kombu.utils.json import dumps

from ampfleet.core import file_broker
from ampfleet.core.broker_wait import STOP_CHECK_S
from ampfleet.core.celery_config import make_celery
from ampfleet.core.settings import Settings

QUEUE = "node.n1"


def _takeable(folder: Path) -> list[str]:
    """The names a consumer of QUEUE would take (kombu's own filter)."""
    return [p.name for p in folder.iterdir() if p.name.partition(".")[2] == f"{QUEUE}.msg"]


def _visible_while_encoding(
    transport: str, folder: Path, module: Any, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    seen: list[str] = []

    def encoding(payload: Any) -> str:
        seen.extend(_takeable(folder))
        return str(dumps(payload))

    monkeypatch.setattr(module, "dumps", encoding)
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    with Connection("filesystem://", transport=transport, transport_options=options) as conn:
        conn.default_channel._put(QUEUE, {"task": "start"})
    return seen


def test_kombus_transport_shows_a_message_before_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race this module closes, shown on kombu's own transport."""
    assert _visible_while_encoding("filesystem", tmp_path, filesystem, monkeypatch) != []


def test_ours_shows_it_only_once_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _visible_while_encoding(file_broker.TRANSPORT, tmp_path, file_broker, monkeypatch) == []
    [name] = _takeable(tmp_path)
    assert (tmp_path / name).read_bytes() == b'{"task": "start"}'
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    with Connection(
        "filesystem://", transport=file_broker.TRANSPORT, transport_options=options
    ) as c:
        assert c.default_channel._get(QUEUE) == {"task": "start"}
    assert list(tmp_path.iterdir()) == []


def test_the_embedded_broker_uses_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, broker_url="")
    with make_celery(settings).connection_for_write() as conn:
        assert conn.transport_cls == file_broker.TRANSPORT
        assert isinstance(conn.transport, file_broker.Transport)


def _waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timeout: float) -> list[float]:
    """The waits the embedded transport asks of kombu's for one drain of `timeout` seconds
    on an empty queue (which ends in TimeoutError)."""
    asked: list[float] = []
    kombus = filesystem.Transport.drain_events

    def waiting(self: Any, connection: Any, timeout: float | None = None) -> None:
        asked.append(timeout or 0.0)
        kombus(self, connection, timeout=timeout)

    monkeypatch.setattr(filesystem.Transport, "drain_events", waiting)
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    with (
        Connection(
            "filesystem://", transport=file_broker.TRANSPORT, transport_options=options
        ) as c,
        pytest.raises(TimeoutError),
    ):
        c.drain_events(timeout=timeout)
    return asked


def test_a_worker_asked_to_stop_stops_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's loop waits 2 s per cycle on this broker and sees a warm shutdown only between
    cycles. Its flag holds the exit code, 0 for a warm shutdown."""
    from celery.worker import state

    monkeypatch.setattr(state, "should_stop", 0)
    assert _waits(tmp_path, monkeypatch, timeout=2.0) == [STOP_CHECK_S]


def test_any_other_caller_waits_as_long_as_it_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's wait between passes is its poll interval, not one slice."""
    asked = _waits(tmp_path, monkeypatch, timeout=0.6)
    assert len(asked) >= 2
    assert max(asked) <= STOP_CHECK_S
    assert sum(asked) == pytest.approx(0.6, abs=0.1)
