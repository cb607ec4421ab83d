"""Webhooks: SSRF refusal, Standard Webhooks messages from the outbox (the envelope, `msg_`
ids, signatures verified with the stock library), the flat form for receivers made before
it, secret rotation, retries with backoff, the log."""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import standardwebhooks
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job, Webhook
from ampfleet.core.sealing import seal
from ampfleet.core.settings import Settings, get_settings
from ampfleet.core.webhooks import Message, legacy_signature
from ampfleet.scheduler.webhook_dispatch import Claimed, send
from ampfleet.workers.ingest import AttemptFeed, apply_records
from ampfleet.workers.rundir import RunDir
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.webhooks import Receiver, dispatch_all


def test_private_targets_are_refused_by_default(client: TestClient) -> None:
    response = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook"})
    assert response.status_code == 422
    detail = response.json()["error"]["details"][0]
    assert detail["field"] == "url"
    assert "loopback or private" in detail["message"]
    for url in ("file:///etc/passwd", "http://user:pw@example.com/", "gopher://x/"):
        assert client.post("/v1/webhooks", json={"url": url}).status_code == 422


@pytest.mark.parametrize(
    "host", ["[::127.0.0.1]", "[::ffff:127.0.0.1]", "[::ffff:0:7f00:1]", "[64:ff9b::a00:1]"]
)
def test_ipv6_forms_of_a_loopback_or_private_ipv4_address_are_refused(
    client: TestClient, host: str
) -> None:
    response = client.post("/v1/webhooks", json={"url": f"http://{host}:9/hook"})
    assert response.status_code == 422, response.text
    assert "loopback or private" in response.json()["error"]["details"][0]["message"]
    assert client.get("/v1/webhooks").json()["items"] == []


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

    envelopes = [json.loads(body) for _, body in receiver.received]
    assert all(set(e) == {"type", "timestamp", "data"} for e in envelopes)
    bodies = [e["data"] for e in envelopes]
    assert [
        (e["type"], e["data"].get("to_state") or e["data"].get("metric")) for e in envelopes
    ] == [
        ("job.state", "QUEUED"),
        ("job.metric", "val_accuracy"),
        ("job.state", "CANCELLED"),
    ]
    for envelope in envelopes:  # RFC 3339, the instant the event itself names
        timestamp = datetime.fromisoformat(envelope["timestamp"])
        assert timestamp.utcoffset() == timedelta(0)
        assert timestamp == datetime.fromisoformat(envelope["data"]["time"])
    assert bodies[1]["value"] == 0.6  # fired once, at the first crossing
    assert hook["secret"].startswith("whsec_")
    verifier = standardwebhooks.Webhook(hook["secret"])
    for headers, body in receiver.received:
        assert verifier.verify(body, headers) == json.loads(body)
        assert "X-Ampfleet-Signature" not in headers  # only for secrets made before the standard
    log = api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]
    assert [d["status"] for d in log] == ["delivered"] * 3
    assert [d["payload"] for d in log] == bodies
    message_ids = [h["webhook-id"] for h, _ in receiver.received]
    assert message_ids == [d["message_id"] for d in log]
    assert all(re.fullmatch(r"msg_[0-9a-z]{26}", i) for i in message_ids), message_ids
    assert len(set(message_ids)) == 3
    assert [h["X-Ampfleet-Delivery"] for h, _ in receiver.received] == [str(d["id"]) for d in log]
    tampered = receiver.received[0][1].replace(b"QUEUED", b"FAILED")
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verifier.verify(tampered, receiver.received[0][0])
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(
            api.post("/v1/webhooks", json={"url": receiver.url}).json()["secret"]
        ).verify(receiver.received[0][1], receiver.received[0][0])
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
        # A retry is the same message to a receiver: the same webhook-id and body each time,
        # signed afresh (the timestamp is the attempt's), so the stock verifier takes each.
        assert ok["message_id"].startswith("msg_")
        assert {h["webhook-id"] for h, _ in flaky.received} == {ok["message_id"]}
        assert len({body for _, body in flaky.received}) == 1
        assert len(flaky.received) == 3
        verifier = standardwebhooks.Webhook(first["secret"])
        for headers, body in flaky.received:
            assert verifier.verify(body, headers)["data"]["to_state"] == "QUEUED"
    finally:
        flaky.close()
        dead.close()


def claimed(delivery_id: int, url: str) -> Claimed:
    """A delivery as the dispatcher claims it, for sending without a database."""
    message = Message(f"msg_{delivery_id}", "job.state", datetime.now(UTC), {})
    return Claimed(delivery_id, url, "s", message, "standard", 0)


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

    delivery = claimed(1, f"http://hooks.rebinding.test:{port}/hook")
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


def certificate_for(name: str, folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for `name` and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_to_a_pinned_address_verifies_the_certificate_against_the_name(
    tmp_path: Path,
) -> None:
    """Connecting to the checked address must not weaken TLS: the server name sent and the
    certificate checked are the URL's host name, not the address."""
    name = "hooks.pinned.test"
    cert_path, key_path = certificate_for(name, tmp_path)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert_path, key_path)
    receiver = Receiver(tls=server_side)
    port = receiver.server.server_port
    trusting = ssl.create_default_context(cafile=str(cert_path))
    settings = Settings(webhook_allow_private=True)

    def to_loopback(_host: str, _port: int) -> list[str]:
        return ["127.0.0.1"]

    try:
        with httpx.Client(timeout=5, verify=trusting) as client:
            named = claimed(1, f"https://{name}:{port}/hook")
            assert send(client, named, settings, to_loopback) == (200, None)
            assert receiver.received[0][0]["Host"] == f"{name}:{port}"
            other = claimed(2, f"https://other.pinned.test:{port}/hook")
            code, error = send(client, other, settings, to_loopback)
        assert code is None
        assert "certificate" in (error or "").lower()
        assert len(receiver.received) == 1
    finally:
        receiver.close()


def _queue_one(api: TestClient) -> None:
    api.post("/v1/jobs", json=job_spec())


def test_a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends(
    private_allowed: None, make_key, receiver: Receiver
) -> None:
    from ampfleet.api.app import create_app

    api = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key()}"})
    hook = api.post("/v1/webhooks", json={"url": receiver.url, "states": ["QUEUED"]}).json()
    rotated = api.post(f"/v1/webhooks/{hook['id']}/rotate-secret")
    assert rotated.status_code == 200
    new = rotated.json()["secret"]
    assert new.startswith("whsec_")
    assert new != hook["secret"]
    _queue_one(api)
    dispatch_all()
    headers, body = receiver.received[-1]
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, hook["secret"]):  # a receiver holding either secret verifies
        standardwebhooks.Webhook(secret).verify(body, headers)

    with session_scope() as session:  # the overlap is over
        row = session.get(Webhook, hook["id"])
        assert row is not None
        row.previous_secret_until = datetime.now(UTC) - timedelta(seconds=1)
    _queue_one(api)
    dispatch_all()
    headers, body = receiver.received[-1]
    assert len(headers["webhook-signature"].split(" ")) == 1
    standardwebhooks.Webhook(new).verify(body, headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(hook["secret"]).verify(body, headers)

    other = make_key(project="other", role="write")
    outsider = TestClient(create_app(), headers={"Authorization": f"Bearer {other}"})
    assert outsider.post(f"/v1/webhooks/{hook['id']}/rotate-secret").status_code == 404
    assert api.post("/v1/webhooks/wh_missing/rotate-secret").status_code == 404


def test_a_secret_made_before_the_standard_verifies_and_keeps_its_old_headers(
    private_allowed: None, make_key, receiver: Receiver
) -> None:
    """A hex secret signs with its text as the HMAC key: as a standard secret it is `whsec_` +
    base64 of that text; its receivers' old X-Ampfleet-Signature checks keep passing."""
    import base64

    from ampfleet.api.app import create_app

    api = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key()}"})
    hook = api.post("/v1/webhooks", json={"url": receiver.url, "states": ["QUEUED"]}).json()
    legacy = "ab" * 32
    with session_scope() as session:
        row = session.get(Webhook, hook["id"])
        assert row is not None
        row.secret = seal(legacy, row_id=row.id, secret_key=get_settings().secret_key)
    _queue_one(api)
    dispatch_all()
    headers, body = receiver.received[-1]
    standardwebhooks.Webhook("whsec_" + base64.b64encode(legacy.encode()).decode()).verify(
        body, headers
    )
    timestamp = int(headers["X-Ampfleet-Timestamp"])
    assert headers["X-Ampfleet-Signature"] == legacy_signature(legacy, timestamp, body)


def test_a_flat_webhook_receives_the_event_alone_until_switched_to_the_envelope(
    private_allowed: None, make_key, receiver: Receiver
) -> None:
    """The form of webhooks made before the envelope, signed and identified the same way;
    switching keeps the webhook's id and secret, and reaches deliveries already queued."""
    from ampfleet.api.app import create_app

    api = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key()}"})
    created = api.post(
        "/v1/webhooks",
        json={"url": receiver.url, "states": ["QUEUED"], "payload_version": "flat"},
    )
    assert created.status_code == 201, created.text
    hook = created.json()
    assert hook["payload_version"] == "flat"
    verifier = standardwebhooks.Webhook(hook["secret"])
    _queue_one(api)
    dispatch_all()
    headers, body = receiver.received[-1]
    flat = verifier.verify(body, headers)
    assert (flat["type"], flat["to_state"]) == ("job.state", "QUEUED")
    assert "data" not in flat
    assert headers["webhook-id"].startswith("msg_")

    _queue_one(api)  # queued while flat, sent after the switch
    switched = api.patch(f"/v1/webhooks/{hook['id']}", json={"payload_version": "standard"})
    assert switched.status_code == 200, switched.text
    assert switched.json()["payload_version"] == "standard"
    assert api.get(f"/v1/webhooks/{hook['id']}").json()["payload_version"] == "standard"
    dispatch_all()
    headers, body = receiver.received[-1]
    envelope = verifier.verify(body, headers)
    assert (envelope["type"], envelope["data"]["to_state"]) == ("job.state", "QUEUED")
    assert len(receiver.received) == 2


@pytest.mark.parametrize("value", ["v2", "STANDARD", "", 1, None, ["flat"], {"v": "flat"}])
def test_a_bad_payload_version_is_a_422_that_changes_nothing(
    client: TestClient, value: object
) -> None:
    refused = client.post(
        "/v1/webhooks", json={"url": "https://1.1.1.1/hook", "payload_version": value}
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "validation_error"
    assert [d["field"] for d in refused.json()["error"]["details"]] == ["payload_version"]
    assert client.get("/v1/webhooks").json()["items"] == []

    hook = client.post("/v1/webhooks", json={"url": "https://1.1.1.1/hook"}).json()
    assert hook["payload_version"] == "standard"  # what a new webhook gets
    path = f"/v1/webhooks/{hook['id']}"
    refused = client.patch(path, json={"payload_version": value})
    assert refused.status_code == 422, refused.text
    assert [d["field"] for d in refused.json()["error"]["details"]] == ["payload_version"]
    assert client.get(path).json()["payload_version"] == "standard"


def test_switching_a_payload_version_asks_for_it_alone_on_a_webhook_one_may_change(
    client: TestClient, make_key
) -> None:
    from ampfleet.api.app import create_app

    hook = client.post("/v1/webhooks", json={"url": "https://1.1.1.1/hook"}).json()
    path = f"/v1/webhooks/{hook['id']}"
    for body in ({}, {"payload_version": "flat", "url": "https://8.8.8.8/hook"}):
        refused = client.patch(path, json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "validation_error"
    assert (
        client.patch("/v1/webhooks/wh_missing", json={"payload_version": "flat"}).status_code == 404
    )
    reader = TestClient(create_app(), headers={"Authorization": f"Bearer {make_key(role='read')}"})
    assert reader.patch(path, json={"payload_version": "flat"}).status_code == 403
    outsider = TestClient(
        create_app(),
        headers={"Authorization": f"Bearer {make_key(project='other', role='write')}"},
    )
    assert outsider.patch(path, json={"payload_version": "flat"}).status_code == 404
    shown = {k: v for k, v in hook.items() if k != "secret"}
    assert client.get(path).json() == shown  # unchanged by any of them


RACE_TRIALS = 30


def test_rotating_a_secret_while_the_webhook_is_deleted_is_404_or_done_never_500(
    client: TestClient,
) -> None:
    """Each trial starts a rotate-secret and a DELETE of one webhook together: the rotation
    either happened before the delete (200) or finds no webhook (404); the delete wins."""
    answers: Counter[tuple[str, int]] = Counter()
    for _ in range(RACE_TRIALS):
        created = client.post("/v1/webhooks", json={"url": "https://1.1.1.1/hook"})
        assert created.status_code == 201, created.text
        path = f"/v1/webhooks/{created.json()['id']}"
        start = threading.Barrier(2, timeout=30)

        def call(method: str, url: str, start: threading.Barrier = start) -> None:
            start.wait()
            answers[(method, client.request(method, url).status_code)] += 1

        racers = [
            threading.Thread(target=call, args=("POST", f"{path}/rotate-secret")),
            threading.Thread(target=call, args=("DELETE", path)),
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(timeout=60)
        assert client.get(path).status_code == 404
    assert set(answers) <= {("POST", 200), ("POST", 404), ("DELETE", 204)}, answers
    assert answers[("DELETE", 204)] == RACE_TRIALS
