"""The per-key cap on requests in flight: past it a key's request is answered 429 with
Retry-After before it reaches the app; other keys, live streams once open, and requests
without a key are not held by it. The app behind it holds its requests until told."""

from __future__ import annotations

import asyncio
import json

import httpx
from starlette.types import Message, Receive, Scope, Send

from ampfleet.api.inflight import KeyInFlightLimitMiddleware

LIMIT = 2
HELD = "amp_held_key"


class HoldingApp:
    """Answers 200 at once, except the key HELD's requests, which wait for `release`; a
    request for /stream answers an event stream's first chunk and then waits."""

    def __init__(self) -> None:
        self.arrived = 0
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.arrived += 1
        held = (b"authorization", f"Bearer {HELD}".encode()) in scope["headers"]
        if scope["path"] == "/stream":
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
            await self.release.wait()
        elif held:
            await self.release.wait()
        if scope["path"] != "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def arrivals(app: HoldingApp, count: int) -> None:
    while app.arrived < count:
        await asyncio.sleep(0)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def scenario() -> None:
    app = HoldingApp()
    transport = httpx.ASGITransport(app=KeyInFlightLimitMiddleware(app, limit=LIMIT))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        held = [asyncio.create_task(http.get("/v1/jobs", headers=bearer(HELD))) for _ in range(2)]
        await asyncio.wait_for(arrivals(app, LIMIT), timeout=10)

        refused = await http.get("/v1/jobs", headers=bearer(HELD))
        assert refused.status_code == 429, refused.text
        assert json.loads(refused.text)["error"]["code"] == "too_many_requests"
        assert int(refused.headers["Retry-After"]) >= 1
        assert app.arrived == LIMIT  # refused before the app saw it
        also_refused = await http.get("/v1/jobs", headers={"X-API-Key": HELD})
        assert also_refused.status_code == 429  # the same key, the other header

        assert (await http.get("/v1/jobs", headers=bearer("amp_other_key"))).status_code == 200
        assert (await http.get("/healthz")).status_code == 200  # no key: not counted

        app.release.set()
        assert [(await task).status_code for task in held] == [200, 200]
        assert (await http.get("/v1/jobs", headers=bearer(HELD))).status_code == 200


async def streams() -> None:
    """A live stream counts until it opens: a key can hold more streams than the cap.
    Driven as plain ASGI calls: the test transport would wait for a stream's end."""
    app = HoldingApp()
    limited = KeyInFlightLimitMiddleware(app, limit=1)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/stream",
        "headers": [(b"authorization", b"Bearer amp_streaming_key")],
    }
    started: list[int] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.append(message["status"])

    opened = [asyncio.create_task(limited(scope, receive, send))]
    await asyncio.wait_for(arrivals(app, 1), timeout=10)
    opened.append(asyncio.create_task(limited(scope, receive, send)))
    await asyncio.wait_for(arrivals(app, 2), timeout=10)
    assert started == [200, 200]
    app.release.set()
    await asyncio.gather(*opened)


def test_a_key_past_its_requests_in_flight_gets_429() -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def test_an_open_stream_no_longer_counts() -> None:
    asyncio.run(asyncio.wait_for(streams(), timeout=30))
