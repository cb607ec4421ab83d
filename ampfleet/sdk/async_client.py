"""`AsyncClient`: the surface of `Client`, with async I/O (asyncio or trio, through anyio).

    async with AsyncClient() as client:
        job = await client.submit("job.yaml")
        async with contextlib.aclosing(client.stream_events(job.id)) as frames:
            async for frame in frames:
                print(frame)

Close an async iterator you leave early (`aclosing`), so that its connection is released
then rather than whenever the event loop collects it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio
import httpx

from ampfleet.core.roles import Role
from ampfleet.core.spec import Priority
from ampfleet.sdk import downloads, models, profiles, recipes, sweeps
from ampfleet.sdk.base import LIMITS, ClientBase
from ampfleet.sdk.flows import CodeSource, InputSource, SpecInput, States
from ampfleet.sdk.protocol import (
    DOWNLOAD_CHUNK,
    Flow,
    Item,
    IterFlow,
    ReadChunk,
    ReadLine,
    Sleep,
    Step,
    Stepper,
)

T = TypeVar("T")


class _AsyncIo:
    """The async I/O of one flow run, and the stream it has open, if any."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.stream: httpx.Response | None = None
        self.lines: AsyncIterator[str] | None = None
        self.chunks: AsyncIterator[bytes] | None = None

    async def perform(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await anyio.sleep(step.seconds)
            return None
        if isinstance(step, ReadLine):
            line = await anext(self.lines, None) if self.lines else None
            if line is None:
                await self.close()
            return line
        if isinstance(step, ReadChunk):
            chunk = await anext(self.chunks, None) if self.chunks else None
            if chunk is None:
                await self.close()
            return chunk
        await self.close()
        response = await self.http.send(step.build(self.http), stream=step.stream)
        if step.stream and response.is_success:
            # Both are lazy: the flow reads the stream one way or the other, never both.
            self.stream, self.lines = response, response.aiter_lines()
            self.chunks = response.aiter_bytes(DOWNLOAD_CHUNK)
        elif step.stream:
            await response.aread()  # the error body, for its message; reading it closes it
        return response

    async def close(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream, self.lines, self.chunks = None, None, None


class AsyncKeys:
    """API keys: `await client.keys.create(...)`, `.list()`, `.revoke(key_id)`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self, role: Role | str = Role.WRITE, name: str = "", project: str | None = None
    ) -> models.CreatedKey:
        return await self._client._run(self._client._ops.create_key(role, name, project))

    async def revoke(self, key_id: str) -> None:
        await self._client._run(self._client._ops.revoke_key(key_id))

    async def list(self, project: str | None = None) -> list[models.Key]:
        return await self._client._run(self._client._ops.list_keys(project))


class AsyncClient(ClientBase[httpx.AsyncClient]):
    """`Client` with async methods and async iterators: the same arguments, defaults,
    results and errors (see Client's methods for what each does).
    """

    def _connect(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url, timeout=self.timeout, headers=self.headers, limits=LIMITS
        )

    @cached_property
    def keys(self) -> AsyncKeys:
        return AsyncKeys(self)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _drive(self, stepper: Stepper) -> AsyncIterator[Any]:
        io = _AsyncIo(self._http)
        try:
            while (step := stepper.next()) is not None:
                if isinstance(step, Item):
                    yield step.value
                    continue
                try:
                    stepper.answer(await io.perform(step))
                except httpx.TransportError as exc:
                    await io.close()
                    stepper.fail(exc)
        finally:
            await io.close()
            stepper.flow.close()

    async def _run(self, flow: Flow[T]) -> T:
        stepper = Stepper(flow)
        async for _ in self._drive(stepper):
            raise TypeError("an operation that returns one value yielded items")
        result: T = stepper.value
        return result

    def _iterate(self, flow: IterFlow[T]) -> AsyncIterator[T]:
        return self._drive(Stepper(flow))

    # -- jobs ---------------------------------------------------------------------------------

    async def submit(
        self,
        spec: SpecInput | None = None,
        idempotency_key: str | None = None,
        *,
        code: CodeSource | None = None,
        inputs: Mapping[str, InputSource] | None = None,
        on_progress: Callable[[str, int], None] | None = None,
        command: Sequence[str] | None = None,
    ) -> models.Job:
        """As `Client.submit`."""
        return await self._run(
            self._ops.submit(spec, idempotency_key, code, inputs, on_progress, command)
        )

    async def upload_bundle(
        self,
        source: str | os.PathLike[str],
        project: str | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> models.Bundle:
        """As `Client.upload_bundle`."""
        return await self._run(self._ops.upload_bundle(Path(source), project, on_progress))

    async def upload_dataset(
        self,
        name: str,
        source: str | os.PathLike[str],
        project: str | None = None,
        filename: str | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> models.Dataset:
        """As `Client.upload_dataset`."""
        return await self._run(
            self._ops.upload_dataset(name, Path(source), project, filename, on_progress)
        )

    async def bundles(self, project: str | None = None) -> list[models.Bundle]:
        return await self._run(self._ops.bundles(project))

    async def datasets(
        self, name: str | None = None, project: str | None = None
    ) -> list[models.Dataset]:
        return await self._run(self._ops.datasets(name, project))

    async def get(self, job_id: str) -> models.Job:
        return await self._run(self._ops.get(job_id))

    async def cancel(self, job_id: str) -> models.Job:
        return await self._run(self._ops.cancel(job_id))

    async def delete(self, job_id: str) -> None:
        await self._run(self._ops.delete(job_id))

    async def set_priority(self, job_id: str, priority: Priority | str) -> models.Job:
        return await self._run(self._ops.set_priority(job_id, priority))

    async def wait(
        self, job_id: str, timeout: float | None = None, poll: float = 0.5, max_poll: float = 5.0
    ) -> models.Job:
        return await self._run(self._ops.wait(job_id, timeout, poll, max_poll))

    # -- sweeps -------------------------------------------------------------------------------

    async def sweep(self, spec: sweeps.SweepInput) -> dict[str, Any]:
        return await self._run(sweeps.create(self._ops.send, spec))

    async def get_sweep(self, sweep_id: str) -> dict[str, Any]:
        return await self._run(sweeps.get(self._ops.send, sweep_id))

    async def sweeps(self, project: str | None = None) -> list[dict[str, Any]]:
        return await self._run(sweeps.listing(self._ops.send, project))

    async def cancel_sweep(self, sweep_id: str) -> dict[str, Any]:
        return await self._run(sweeps.cancel(self._ops.send, sweep_id))

    async def wait_sweep(
        self,
        sweep_id: str,
        timeout: float | None = None,
        poll: float = 1.0,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        return await self._run(sweeps.wait(self._ops.send, sweep_id, timeout, poll, on_poll))

    async def sweep_events(self, sweep_id: str, after: int = 0) -> list[dict[str, Any]]:
        return await self._run(sweeps.events(self._ops.send, sweep_id, after))

    def stream_sweep_events(
        self, sweep_id: str, last_event_id: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        opener = self._ops.opener(sweeps.events_path(sweep_id), ())
        return self._iterate(sweeps.stream_events(opener, last_event_id, self._ops.max_reconnects))

    # -- what a job reports -------------------------------------------------------------------

    async def events(self, job_id: str, after: int = 0) -> list[models.Event]:
        return await self._run(self._ops.events(job_id, after))

    def stream_events(
        self, job_id: str, last_event_id: str | None = None
    ) -> AsyncIterator[models.JobFrame]:
        return self._iterate(self._ops.stream_events(job_id, last_event_id))

    async def metrics(
        self, job_id: str, names: str | Iterable[str] | None = None, max_points: int | None = None
    ) -> models.JobMetrics:
        return await self._run(self._ops.metrics(job_id, names, max_points))

    async def diagnosis(self, job_id: str) -> models.Diagnosis:
        return await self._run(self._ops.diagnosis(job_id))

    def logs(
        self, job_id: str, rank: int | None = None, tail: int | None = None, follow: bool = False
    ) -> AsyncIterator[models.LogLine]:
        return self._iterate(self._ops.logs(job_id, rank, tail, follow))

    async def nodes(self) -> list[models.Node]:
        return await self._run(self._ops.nodes())

    async def console_login(self) -> models.ConsoleLogin:
        return await self._run(self._ops.console_login(self.base_url))

    # -- what a job produced ------------------------------------------------------------------

    async def artifacts(self, job_id: str) -> list[models.Artifact]:
        return await self._run(downloads.list_artifacts(self._ops, job_id))

    async def checkpoints(self, job_id: str) -> list[models.Checkpoint]:
        return await self._run(downloads.list_checkpoints(self._ops, job_id))

    async def samples(self, job_id: str, limit: int = 20) -> list[models.Sample]:
        return await self._run(downloads.list_samples(self._ops, job_id, limit))

    async def export_checkpoint(
        self, job_id: str, step: int, dtype: str | None = None
    ) -> models.Job:
        return await self._run(self._ops.export_checkpoint(job_id, step, dtype))

    async def download(
        self,
        job_id: str,
        name: str = downloads.MODEL,
        to: str | Path = ".",
        progress: downloads.ProgressCallback | None = None,
    ) -> list[Path]:
        return await self._run(downloads.download(self._ops, job_id, name, Path(to), progress))

    async def download_checkpoint(
        self,
        job_id: str,
        step: int,
        to: str | Path = ".",
        progress: downloads.ProgressCallback | None = None,
    ) -> Path:
        return await self._run(
            downloads.download_checkpoint(self._ops, job_id, step, Path(to), progress)
        )

    async def profile(
        self,
        job_id: str,
        steps: int = 5,
        ranks: Iterable[int] | None = None,
        record_shapes: bool = False,
    ) -> models.Profile:
        return await self._run(
            profiles.request_profile(self._ops, job_id, steps, ranks, record_shapes)
        )

    async def get_profile(self, job_id: str, profile_id: str | None = None) -> models.Profile:
        return await self._run(profiles.get_profile(self._ops, job_id, profile_id))

    async def profiles(self, job_id: str, limit: int = 20) -> list[models.Profile]:
        return await self._run(profiles.list_profiles(self._ops, job_id, limit))

    async def cancel_profile(self, job_id: str) -> models.Profile:
        return await self._run(profiles.cancel_profile(self._ops, job_id))

    async def wait_profile(
        self,
        job_id: str,
        profile_id: str,
        timeout: float | None = None,
        poll: float = 0.5,
        max_poll: float = 5.0,
        on_poll: Callable[[models.Profile], None] | None = None,
    ) -> models.Profile:
        return await self._run(
            profiles.wait_profile(
                self._ops,
                job_id,
                profile_id,
                timeout=timeout,
                poll=poll,
                max_poll=max_poll,
                on_poll=on_poll,
            )
        )

    async def download_profile(
        self,
        job_id: str,
        profile_id: str,
        to: str | Path = ".",
        progress: downloads.ProgressCallback | None = None,
    ) -> list[Path]:
        return await self._run(
            profiles.download_profile(self._ops, job_id, profile_id, Path(to), progress)
        )

    async def recipes(self) -> list[models.Recipe]:
        return await self._run(recipes.list_recipes(self._ops))

    async def recipe(self, name: str) -> models.Recipe:
        return await self._run(recipes.get_recipe(self._ops, name))

    # Last: below it, `list` would name this method in annotations.
    def list(
        self, state: States = None, project: str | None = None, limit: int | None = None
    ) -> AsyncIterator[models.Job]:
        return self._iterate(self._ops.list_jobs(state, project, limit, self.page_size))
