"""Webhooks: SSRF refusal, signed deliveries from the outbox, retries with backoff, the log."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job
from ampfleet.core.settings import Settings, get_settings
from ampfleet.core.webhooks import sign
from ampfleet.scheduler.webhook_dispatch import Claimed, deliver_due, send
from ampfleet.workers.ingest import AttemptFeed, apply_records
from ampfleet.workers.rundir import RunDir
from tests.factories import job_spec
from tests.support.env import environment


class Receiver:
    """A local HTTP endpoint that records what it receives and answers `codes` in turn."""

    def __init__(
        self, codes: list[int] | None = None, address: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.codes = list(codes or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.codes.pop(0) if receiver.codes else 200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                return

        self.server = HTTPServer(address, Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def private_allowed(backend: str) -> Iterator[None]:
    with environment(
        {"AMPFLEET_WEBHOOK_ALLOW_PRIVATE": "true", "AMPFLEET_WEBHOOK_RETRY_BASE_S": "0.01"}
    ):
        yield


def dispatch_all(rounds: int = 1) -> None:
    import time

    with httpx.Client(timeout=5) as client:
        for _ in range(rounds):
            deliver_due(get_settings(), client)
            time.sleep(0.05)


def test_private_targets_are_refused_by_default(client: TestClient) -> None:
    response = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook"})
    assert response.status_code == 422
    detail = response.json()["error"]["details"][0]
    assert detail["field"] == "url"
    assert "loopback or private" in detail["message"]
    for url in ("file:///etc/passwd", "http://user:pw@example.com/", "gopher://x/"):
        assert client.post("/v1/webhooks", json={"url": url}).status_code == 422


def test_state_changes_and_thresholds_are_delivered_signed(
    private_allowed: None, make_key, receiver: Receiver, tmp_path
) -> None:
    from ampfleet.api.app import create_app

    api = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key()}"})
    created = api.post(
        "/v1/webhooks",
        json={
            "url": receiver.url,
            "states": ["*"],
            "metric_thresholds": [{"name": "val_accuracy", "op": ">=", "value": 0.5}],
        },
    )
    assert created.status_code == 201
    hook = created.json()
    assert "secret" not in api.get(f"/v1/webhooks/{hook['id']}").json()
    job = api.post("/v1/jobs", json=job_spec()).json()
    with session_scope() as session:
        row = session.get(Job, job["id"])
        assert row is not None
        records = [
            {"kind": "metrics", "step": s, "values": {"val_accuracy": v}}
            for s, v in ((1, 0.3), (2, 0.6), (3, 0.9))
        ]
        apply_records(session, row, 0, records, AttemptFeed(RunDir(tmp_path)), get_settings())
    api.post(f"/v1/jobs/{job['id']}/cancel")
    dispatch_all()

    bodies = [json.loads(body) for _, body in receiver.received]
    assert [(b["type"], b.get("to_state") or b.get("metric")) for b in bodies] == [
        ("job.state", "QUEUED"),
        ("job.metric", "val_accuracy"),
        ("job.state", "CANCELLED"),
    ]
    assert bodies[1]["value"] == 0.6  # fired once, at the first crossing
    for headers, body in receiver.received:
        timestamp = int(headers["X-Ampfleet-Timestamp"])
        assert headers["X-Ampfleet-Signature"] == sign(hook["secret"], timestamp, body)
    log = api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]
    assert [d["status"] for d in log] == ["delivered"] * 3
    assert all(d["attempts"] == 1 and d["last_status_code"] == 200 for d in log)


def test_failed_deliveries_are_retried_with_backoff_then_given_up(
    private_allowed: None, make_key
) -> None:
    from ampfleet.api.app import create_app

    flaky, dead = Receiver([500, 503]), Receiver([500] * 20)
    try:
        api = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key()}"})
        first = api.post("/v1/webhooks", json={"url": flaky.url, "states": ["QUEUED"]}).json()
        second = api.post("/v1/webhooks", json={"url": dead.url, "states": ["QUEUED"]}).json()
        api.post("/v1/jobs", json=job_spec())
        with environment(
            {
                "AMPFLEET_WEBHOOK_MAX_ATTEMPTS": "4",
                "AMPFLEET_WEBHOOK_ALLOW_PRIVATE": "true",
                "AMPFLEET_WEBHOOK_RETRY_BASE_S": "0.01",
            }
        ):
            dispatch_all(rounds=8)
        ok = api.get(f"/v1/webhooks/{first['id']}/deliveries").json()["items"][0]
        assert (ok["status"], ok["attempts"], ok["last_status_code"]) == ("delivered", 3, 200)
        gone = api.get(f"/v1/webhooks/{second['id']}/deliveries").json()["items"][0]
        assert (gone["status"], gone["attempts"], gone["last_error"]) == ("failed", 4, "HTTP 500")
        assert len(dead.received) == 4
    finally:
        flaky.close()
        dead.close()


def test_a_delivery_goes_to_the_address_that_was_checked() -> None:
    """DNS rebinding: the answer checked is the address connected to. The name resolves only
    through the guard's resolver, so any second lookup at connect time would fail; and each
    send looks the name up once, so a changed answer is checked before it is used."""
    first = Receiver()
    port = first.server.server_port
    second = Receiver(address=("127.0.0.2", port))
    answers = [["127.0.0.1"], ["127.0.0.2"], ["10.0.0.1"]]
    asked: list[tuple[str, int]] = []

    def changing(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return answers[min(len(asked), len(answers)) - 1]

    delivery = Claimed(1, f"http://hooks.rebinding.test:{port}/hook", "s", "job.state", {}, 0)
    try:
        with httpx.Client(timeout=5) as client:
            allowed = Settings(webhook_allow_private=True)
            assert send(client, delivery, allowed, changing) == (200, None)
            assert [len(first.received), len(second.received)] == [1, 0]
            assert first.received[0][0]["Host"] == f"hooks.rebinding.test:{port}"
            assert send(client, delivery, allowed, changing) == (200, None)
            assert [len(first.received), len(second.received)] == [1, 1]
            code, error = send(client, delivery, Settings(), changing)
        assert code is None
        assert "10.0.0.1" in (error or "")
        assert asked == [("hooks.rebinding.test", port)] * 3
    finally:
        first.close()
        second.close()
