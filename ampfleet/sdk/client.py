# Written by tools/unasync_sdk.py (`make sdk`) from async_client.py: edit that file.
"""`Client`: the API from Python, with blocking I/O.

from ampfleet import Client

with Client() as client:  # AMPFLEET_URL, AMPFLEET_API_KEY, or var/admin.key
    job = client.submit("job.yaml")
    for frame in client.stream_events(job.id):
        print(frame)
    print(client.wait(job.id).state)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

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


class _Io:
    """The I/O of one flow run, and the stream it has open, if any."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.stream: httpx.Response | None = None
        self.lines: Iterator[str] | None = None
        self.chunks: Iterator[bytes] | None = None

    def perform(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, ReadLine):
            line = next(self.lines, None) if self.lines else None
            if line is None:
                self.close()
            return line
        if isinstance(step, ReadChunk):
            chunk = next(self.chunks, None) if self.chunks else None
            if chunk is None:
                self.close()
            return chunk
        self.close()
        response = self.http.send(step.build(self.http), stream=step.stream)
        if step.stream and response.is_success:
            # Both are lazy: the flow reads the stream one way or the other, never both.
            self.stream, self.lines = response, response.iter_lines()
            self.chunks = response.iter_bytes(DOWNLOAD_CHUNK)
        elif step.stream:
            response.read()  # the error body, for its message; reading it closes it
        return response

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream, self.lines, self.chunks = None, None, None


class Client(ClientBase[httpx.Client]):
    """A client of the ampfleet API, with blocking I/O; error answers
    raise `ApiError` subclasses.

    Use it as a context manager, or call `close()`. Iterators hold a connection
    until they are exhausted or closed.
    """

    def _connect(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, timeout=self.timeout, headers=self.headers, limits=LIMITS
        )

    @cached_property
    def keys(self) -> Keys:
        """API keys: `client.keys.create(...)`, `.list()`, `.revoke(key_id)`."""
        return Keys(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _drive(self, stepper: Stepper) -> Iterator[Any]:
        io = _Io(self._http)
        try:
            while (step := stepper.next()) is not None:
                if isinstance(step, Item):
                    yield step.value
                    continue
                try:
                    stepper.answer(io.perform(step))
                except httpx.TransportError as exc:
                    io.close()
                    stepper.fail(exc)
        finally:
            io.close()
            stepper.flow.close()

    def _run(self, flow: Flow[T]) -> T:
        stepper = Stepper(flow)
        for _ in self._drive(stepper):
            raise TypeError("an operation that returns one value yielded items")
        result: T = stepper.value
        return result

    def _iterate(self, flow: IterFlow[T]) -> Iterator[T]:
        return self._drive(Stepper(flow))

    # -- jobs ---------------------------------------------------------------------------------

    def submit(
        self,
        spec: SpecInput | None = None,
        idempotency_key: str | None = None,
        *,
        code: CodeSource | None = None,
        inputs: Mapping[str, InputSource] | None = None,
        on_progress: Callable[[str, int], None] | None = None,
        command: Sequence[str] | None = None,
    ) -> models.Job:
        """Submits a JobSpec, a dict, or the path of a YAML file; a spec that cannot be valid
        raises SpecError before any request. The same idempotency key and spec give the
        same job (a different spec with that key is refused).
        `code`: a folder (packed, honouring .gitignore and .ampignore), an archive, or a
        `bnd_...` id, for the spec's `code.bundle`; `inputs`: name -> a folder or file
        (uploaded as the dataset `name`) or a `name@version` / `file:///` reference.
        `on_progress(what, bytes_sent)` hears the uploads. `command`: run this program and
        its arguments as they are on every rank (script mode: `code.command`, the spec
        optional then), e.g. `submit(command=["python", "train.py"], code="my-project/")`."""
        return self._run(
            self._ops.submit(spec, idempotency_key, code, inputs, on_progress, command)
        )

    def upload_bundle(
        self,
        source: str | os.PathLike[str],
        project: str | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> models.Bundle:
        """A folder (packed first) or a zip / tar.gz as a code bundle; the same bytes give
        the same bundle. Over the server's limit: PayloadTooLarge naming the largest files."""
        return self._run(self._ops.upload_bundle(Path(source), project, on_progress))

    def upload_dataset(
        self,
        name: str,
        source: str | os.PathLike[str],
        project: str | None = None,
        filename: str | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> models.Dataset:
        """A folder (packed first), an archive, or one file as the next version of dataset
        `name` (the same bytes as an existing version are that version)."""
        return self._run(
            self._ops.upload_dataset(name, Path(source), project, filename, on_progress)
        )

    def bundles(self, project: str | None = None) -> list[models.Bundle]:
        return self._run(self._ops.bundles(project))

    def datasets(self, name: str | None = None, project: str | None = None) -> list[models.Dataset]:
        return self._run(self._ops.datasets(name, project))

    def get(self, job_id: str) -> models.Job:
        return self._run(self._ops.get(job_id))

    def cancel(self, job_id: str) -> models.Job:
        """A queued job ends CANCELLED at once, a placed one goes CANCELLING first."""
        return self._run(self._ops.cancel(job_id))

    def delete(self, job_id: str) -> None:
        """Deletes a job that ended (Conflict otherwise) with its events, metrics, logs and
        artifacts; the store keeps only bytes another job or bundle still names."""
        self._run(self._ops.delete(job_id))

    def set_priority(self, job_id: str, priority: Priority | str) -> models.Job:
        """`low`, `normal` or `high`; the scheduler applies it from its next pass."""
        return self._run(self._ops.set_priority(job_id, priority))

    def wait(
        self, job_id: str, timeout: float | None = None, poll: float = 0.5, max_poll: float = 5.0
    ) -> models.Job:
        """Polls (after `poll` seconds, 1.5x longer each time up to `max_poll`) until the job
        is terminal and returns it; raises WaitTimeout after `timeout` seconds."""
        return self._run(self._ops.wait(job_id, timeout, poll, max_poll))

    # -- sweeps -------------------------------------------------------------------------------

    def sweep(self, spec: sweeps.SweepInput) -> dict[str, Any]:
        """Starts a sweep (a SweepSpec, a dict, or a YAML file's path): Optuna trials run as
        jobs. A spec that cannot be valid raises SpecError before any request."""
        return self._run(sweeps.create(self._ops.send, spec))

    def get_sweep(self, sweep_id: str) -> dict[str, Any]:
        """The sweep with its trials, best trial (or Pareto front) and precision report."""
        return self._run(sweeps.get(self._ops.send, sweep_id))

    def sweeps(self, project: str | None = None) -> list[dict[str, Any]]:
        return self._run(sweeps.listing(self._ops.send, project))

    def cancel_sweep(self, sweep_id: str) -> dict[str, Any]:
        """No new trial; its trials not yet ended are cancelled."""
        return self._run(sweeps.cancel(self._ops.send, sweep_id))

    def wait_sweep(
        self,
        sweep_id: str,
        timeout: float | None = None,
        poll: float = 1.0,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Polls until the sweep ended; `on_poll(sweep)` sees each read (a live table)."""
        return self._run(sweeps.wait(self._ops.send, sweep_id, timeout, poll, on_poll))

    def sweep_events(self, sweep_id: str, after: int = 0) -> list[dict[str, Any]]:
        """Its events (a trial started, pruned, ended; its end) with an id above `after`."""
        return self._run(sweeps.events(self._ops.send, sweep_id, after))

    def stream_sweep_events(
        self, sweep_id: str, last_event_id: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Live frames ({"kind": "event" | "progress" | "end", "id", "data"}) until the
        sweep has ended and its trials with it; resumed by itself across dropped
        connections, or from `last_event_id` (a frame's `id`)."""
        opener = self._ops.opener(sweeps.events_path(sweep_id), ())
        return self._iterate(sweeps.stream_events(opener, last_event_id, self._ops.max_reconnects))

    # -- what a job reports -------------------------------------------------------------------

    def events(self, job_id: str, after: int = 0) -> list[models.Event]:
        """Every transition and notable event (with an id above `after`), oldest first."""
        return self._run(self._ops.events(job_id, after))

    def stream_events(
        self, job_id: str, last_event_id: str | None = None
    ) -> Iterator[models.JobFrame]:
        """Live frames (StateFrame, EventFrame, ProgressFrame, MetricsFrame, then EndFrame)
        until the job ends. A dropped connection is resumed from the last frame; to resume
        later yourself, pass the last frame's `id` as `last_event_id`."""
        return self._iterate(self._ops.stream_events(job_id, last_event_id))

    def metrics(
        self, job_id: str, names: str | Iterable[str] | None = None, max_points: int | None = None
    ) -> models.JobMetrics:
        """Each series (all, or `names`) in `.series`, downsampled by the server to
        `max_points`. To follow the job live from there, without these points again:

            events = client.events(job_id)
            history = client.metrics(job_id)
            cursor = history.stream_cursor(events[-1].id if events else 0)
            for frame in client.stream_events(job_id, last_event_id=cursor): ...
        """
        return self._run(self._ops.metrics(job_id, names, max_points))

    def diagnosis(self, job_id: str) -> models.Diagnosis:
        """Why the job's accelerators idle: its latest steps' breakdown, and findings."""
        return self._run(self._ops.diagnosis(job_id))

    def logs(
        self, job_id: str, rank: int | None = None, tail: int | None = None, follow: bool = False
    ) -> Iterator[models.LogLine]:
        """Lines of every rank (or of `rank`), the last `tail` of them; with `follow`, then
        the lines as they are written, until the job ends."""
        return self._iterate(self._ops.logs(job_id, rank, tail, follow))

    def nodes(self) -> list[models.Node]:
        """Worker nodes with their slots and liveness."""
        return self._run(self._ops.nodes())

    def console_login(self) -> models.ConsoleLogin:
        """A one-time link that opens the web console logged in as this client's key, for
        a minute (`ampfleet ui`): the key itself never goes into the link."""
        return self._run(self._ops.console_login(self.base_url))

    # -- what a job produced ------------------------------------------------------------------

    def artifacts(self, job_id: str) -> list[models.Artifact]:
        """Everything the job produced: model, manifest, checkpoints, recipe outputs."""
        return self._run(downloads.list_artifacts(self._ops, job_id))

    def checkpoints(self, job_id: str) -> list[models.Checkpoint]:
        """The job's stored checkpoints by step, each with the setup it was made under."""
        return self._run(downloads.list_checkpoints(self._ops, job_id))

    def samples(self, job_id: str, limit: int = 20) -> list[models.Sample]:
        """What the model generated at the job's latest `limit` evaluations, by step (a
        causal LM's fine-tune completes its sample prompts at each evaluation)."""
        return self._run(downloads.list_samples(self._ops, job_id, limit))

    def export_checkpoint(self, job_id: str, step: int, dtype: str | None = None) -> models.Job:
        """Queues a job that exports the job's stored checkpoint of `step` as a model (0
        steps from its weights: evaluated, then exported as a finished run is; a fine-tune's
        `hf/merged/`); `dtype` ("fp32", "bf16"): the model's, else the job's export.dtype.
        `wait` for it, then `download` from it."""
        return self._run(self._ops.export_checkpoint(job_id, step, dtype))

    def download(
        self,
        job_id: str,
        name: str = downloads.MODEL,
        to: str | Path = ".",
        progress: downloads.ProgressCallback | None = None,
    ) -> list[Path]:
        """Downloads the artifact `name` into folder `to` (as `to/<name>`); "model" means
        model.safetensors and manifest.json, a name ending in "/" every artifact under it
        (`hf/merged/`: a fine-tuned model as Hugging Face loads it). Resumable: an
        interrupted download continues from its `.part` file; the sha256 is verified
        (DownloadCorrupted, and no file, if it does not match). `progress(name, done,
        total)` is called as bytes arrive."""
        return self._run(downloads.download(self._ops, job_id, name, Path(to), progress))

    def download_checkpoint(
        self,
        job_id: str,
        step: int,
        to: str | Path = ".",
        progress: downloads.ProgressCallback | None = None,
    ) -> Path:
        """Downloads the checkpoint at `step` as `to/checkpoint-<step>.tar`, like `download`."""
        return self._run(downloads.download_checkpoint(self._ops, job_id, step, Path(to), progress))

    # -- profiles on demand -------------------------------------------------------------------

    def profile(
        self,
        job_id: str,
        steps: int = 5,
        ranks: Iterable[int] | None = None,
        record_shapes: bool = False,
    ) -> models.Profile:
        """Asks a RUNNING job's ranks (`ranks`, default all) to capture their next `steps`
        steps with torch.profiler; returns the profile as requested (Conflict while another
        is in progress). `wait_profile`, then `download_profile`, for the traces."""
        return self._run(profiles.request_profile(self._ops, job_id, steps, ranks, record_shapes))

    def get_profile(self, job_id: str, profile_id: str | None = None) -> models.Profile:
        """One profile of the job; without `profile_id`, its latest."""
        return self._run(profiles.get_profile(self._ops, job_id, profile_id))

    def profiles(self, job_id: str, limit: int = 20) -> list[models.Profile]:
        """The job's profiles, newest first."""
        return self._run(profiles.list_profiles(self._ops, job_id, limit))

    def cancel_profile(self, job_id: str) -> models.Profile:
        """Cancels the job's profile that is requested or capturing: nothing is stored."""
        return self._run(profiles.cancel_profile(self._ops, job_id))

    def wait_profile(
        self,
        job_id: str,
        profile_id: str,
        timeout: float | None = None,
        poll: float = 0.5,
        max_poll: float = 5.0,
        on_poll: Callable[[models.Profile], None] | None = None,
    ) -> models.Profile:
        """Polls until the profile is done, failed or cancelled, and returns it (`on_poll`
        sees every answer); raises ProfileTimeout after `timeout` seconds."""
        return self._run(
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

    def download_profile(
        self,
        job_id: str,
        profile_id: str,
        to: str | Path = ".",
        progress: downloads.ProgressCallback | None = None,
    ) -> list[Path]:
        """A done profile's traces and summary.json into `to/profiles/<id>/`, like
        `download` (resumable, sha256 verified)."""
        return self._run(
            profiles.download_profile(self._ops, job_id, profile_id, Path(to), progress)
        )

    # -- what the fleet offers ----------------------------------------------------------------

    def recipes(self) -> list[models.Recipe]:
        """The installed recipes, by name, each with its hyperparameters' JSON Schema."""
        return self._run(recipes.list_recipes(self._ops))

    def recipe(self, name: str) -> models.Recipe:
        """One installed recipe; NotFound if it is not installed."""
        return self._run(recipes.get_recipe(self._ops, name))

    # Last: below it, `list` would name this method in annotations.
    def list(
        self, state: States = None, project: str | None = None, limit: int | None = None
    ) -> Iterator[models.Job]:
        """Jobs (in any of the states `state`), newest first, across pages; `limit` at most."""
        return self._iterate(self._ops.list_jobs(state, project, limit, self.page_size))


class Keys:
    """API keys of the fleet (admin) or of the key's own project."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self, role: Role | str = Role.WRITE, name: str = "", project: str | None = None
    ) -> models.CreatedKey:
        """A new key; its secret (`.key`) is shown this once."""
        return self._client._run(self._client._ops.create_key(role, name, project))

    def revoke(self, key_id: str) -> None:
        """The key stops working at once."""
        self._client._run(self._client._ops.revoke_key(key_id))

    def list(self, project: str | None = None) -> list[models.Key]:
        return self._client._run(self._client._ops.list_keys(project))
