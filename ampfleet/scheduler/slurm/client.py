"""A small slurmrestd client: submit, look up, watch and cancel jobs; read nodes.

slurmrestd versions its schema in the path. Slurm 22.05 ships the `openapi/v0.0.38` plugin;
23.02 and later serve `v0.0.39`+ through the data parser, where several fields changed shape
(job_state a list of flags, numbers as `{"set", "infinite", "number"}`, the environment a list
of `K=V`, the script inside the job). The client asks `/openapi` which versions the server has,
speaks the newest it knows, and normalises both answers into the same small records, so nothing
above this module sees a schema version.

Jobs are found by name: ampfleet names each Slurm job after its job and attempt, which is what
makes a submit idempotent across scheduler restarts (starts.py looks before it submits).

Auth: local (the unix socket's peer), or JWT: `X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN`
on every request, the token read again from its file for each one, so that an operator
rotates it by replacing the file. A 401 or 403 is not Slurm refusing the job but ampfleet's
credentials refused (an expired token): `SlurmError.refused` is False, and the caller waits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

KNOWN_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")
"""Newest first: the first one the server offers is the one spoken."""
_PATH_VERSION = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


class SlurmError(RuntimeError):
    """slurmrestd answered with an error (`refused`: Slurm said no to this request, and will
    again), or could not be reached, or refused ampfleet's credentials (`refused` False: a
    later try may succeed)."""

    def __init__(self, message: str, *, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused


AUTH_REFUSED = frozenset({401, 403})


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str
    """The base state: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL ..."""
    reason: str
    nodes: str
    exit_code: int | None
    comment: str = ""
    restarts: int = 0
    """How often Slurm requeued it (`restart_cnt`): a node failure or preemption requeues a
    batch job where the submit could not turn requeue off (22.05's v0.0.38 ignores it)."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str
    """Base state and flags, lower case, e.g. "idle", "mixed", "down+drain"."""
    cpus: int
    alloc_cpus: int
    gpus: int
    memory_mb: int
    partitions: tuple[str, ...]
    reason: str = ""
    address: str = ""


@dataclass(frozen=True)
class BatchJob:
    """What ampfleet asks of Slurm for one attempt: the gang, its limit and its script."""

    name: str
    script: str
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    environment: Mapping[str, str]
    working_directory: str
    time_limit_min: int | None
    comment: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_task: int = 0
    standard_output: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class SlurmClient:
    """`url`: `unix:/path/to/slurmrestd.socket` or `http(s)://host:port`. JWT auth: `token`,
    or `token_file` (read for every request; it wins), with `user`; none: local auth, as
    the socket's peer."""

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        token: str | None = None,
        token_file: Path | None = None,
        timeout_s: float = 15.0,
    ) -> None:
        self._user, self._token, self._token_file = user, token, token_file
        if url.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=url.removeprefix("unix:"))
            self._http = httpx.Client(
                transport=transport, base_url="http://slurmrestd", timeout=timeout_s
            )
        else:
            self._http = httpx.Client(base_url=url, timeout=timeout_s)
        self._version: str | None = None

    def close(self) -> None:
        self._http.close()

    # -- the schema version ---------------------------------------------------------------

    @property
    def version(self) -> str:
        if self._version is None:
            self._version = self._negotiate()
        return self._version

    def offered_versions(self) -> list[str]:
        """The versions of the `slurm` API this server serves, from its OpenAPI document."""
        document = self._call("GET", "/openapi")
        found = set()
        for path in document.get("paths", {}):
            match = _PATH_VERSION.match(path)
            if match:
                found.add(match.group(1))
        return sorted(found, key=_version_key, reverse=True)

    def use_version(self, version: str) -> None:
        """Speak `version` (one the server offers) instead of the newest."""
        if version not in KNOWN_VERSIONS:
            raise SlurmError(f"the client does not speak {version}")
        self._version = version

    def _negotiate(self) -> str:
        offered = set(self.offered_versions())
        for version in KNOWN_VERSIONS:
            if version in offered:
                return version
        raise SlurmError(
            f"slurmrestd offers {sorted(offered) or 'no slurm API'}; this client speaks "
            f"{', '.join(KNOWN_VERSIONS)}"
        )

    @property
    def _legacy(self) -> bool:
        return self.version == "v0.0.38"

    # -- calls ----------------------------------------------------------------------------

    def ping(self) -> None:
        self._call("GET", f"/slurm/{self.version}/ping")

    def submit(self, job: BatchJob) -> int:
        answer = self._call(
            "POST", f"/slurm/{self.version}/job/submit", json=self._submit_body(job)
        )
        job_id = answer.get("job_id")
        if job_id is None:
            raise SlurmError(f"slurmrestd accepted the job without a job id: {answer}")
        return int(job_id)

    def jobs(self) -> list[SlurmJob]:
        """Every job the controller still knows (queued, running, recently ended)."""
        answer = self._call("GET", f"/slurm/{self.version}/jobs")
        return [self._job(raw) for raw in answer.get("jobs", [])]

    def job(self, job_id: int) -> SlurmJob | None:
        try:
            answer = self._call("GET", f"/slurm/{self.version}/job/{job_id}")
        except SlurmError as error:
            if "Invalid job id" in str(error) or "not found" in str(error).lower():
                return None
            raise
        jobs = answer.get("jobs", [])
        return self._job(jobs[0]) if jobs else None

    def find(self, name: str) -> list[SlurmJob]:
        """The jobs named `name`, oldest first."""
        return sorted((j for j in self.jobs() if j.name == name), key=lambda j: j.job_id)

    def cancel(self, job_id: int) -> None:
        """Cancel (Slurm's default: SIGTERM to the steps, SIGKILL after KillWait). A job that
        already ended is not an error."""
        try:
            self._call("DELETE", f"/slurm/{self.version}/job/{job_id}")
        except SlurmError as error:
            if "already completing or completed" not in str(error).lower():
                raise

    def nodes(self) -> list[SlurmNode]:
        answer = self._call("GET", f"/slurm/{self.version}/nodes")
        return [_node(raw) for raw in answer.get("nodes", [])]

    def auth_headers(self) -> dict[str, str]:
        """The JWT headers of the next request (none: local auth)."""
        token = self._token
        if self._token_file is not None:
            try:
                token = self._token_file.read_text().strip()
            except OSError as error:
                raise SlurmError(
                    f"cannot read the Slurm token file {self._token_file}: {error}",
                    refused=False,
                ) from None
        if not token:
            return {}
        headers = {"X-SLURM-USER-TOKEN": token}
        if self._user:
            headers["X-SLURM-USER-NAME"] = self._user
        return headers

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, headers=self.auth_headers(), **kwargs)
        except httpx.HTTPError as error:
            raise SlurmError(
                f"slurmrestd unreachable: {type(error).__name__}: {error}", refused=False
            ) from error
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        errors = [e for e in body.get("errors", []) if isinstance(e, dict)]
        if response.status_code in AUTH_REFUSED:
            raise SlurmError(
                f"slurmrestd refused ampfleet's credentials ({method} {path}: HTTP "
                f"{response.status_code}: {_described(errors, response)}); an expired or "
                "revoked token is replaced in AMPFLEET_SLURM_TOKEN_FILE, read for each call",
                refused=False,
            )
        if response.status_code >= 400 or any(e.get("error_number", 0) for e in errors):
            raise SlurmError(
                f"{method} {path}: HTTP {response.status_code}: {_described(errors, response)}",
                refused=response.status_code < 500 or bool(errors),
            )
        return body

    # -- the two schemas ------------------------------------------------------------------

    def _submit_body(self, job: BatchJob) -> dict[str, Any]:
        props: dict[str, Any] = {
            "name": job.name,
            "comment": job.comment,
            "tasks": job.nodes * job.tasks_per_node,
            "tasks_per_node": job.tasks_per_node,
            "cpus_per_task": job.cpus_per_task,
            "current_working_directory": job.working_directory,
            "requeue": False,  # a retry is ampfleet's decision, made with its own policy
        }
        for key, value in (
            ("partition", job.partition),
            ("account", job.account),
            ("qos", job.qos),
            ("standard_output", job.standard_output),
        ):
            if value:
                props[key] = value
        if job.gpus_per_task:
            props["tres_per_task"] = f"gres/gpu:{job.gpus_per_task}"
        if self._legacy:
            props["nodes"] = str(job.nodes)
            props["environment"] = dict(job.environment)
            if job.time_limit_min is not None:
                props["time_limit"] = job.time_limit_min
            return {"script": job.script, "job": {**props, **job.extra}}
        props["minimum_nodes"] = job.nodes
        props["maximum_nodes"] = job.nodes
        props["environment"] = [f"{k}={v}" for k, v in job.environment.items()]
        if job.time_limit_min is not None:
            props["time_limit"] = {"set": True, "infinite": False, "number": job.time_limit_min}
        props["script"] = job.script
        return {"job": {**props, **job.extra}}

    def _job(self, raw: Mapping[str, Any]) -> SlurmJob:
        state = raw.get("job_state", "")
        if isinstance(state, list):  # v0.0.39+: the base state first, then flags
            state = state[0] if state else ""
        return SlurmJob(
            job_id=int(raw["job_id"]),
            name=str(raw.get("name", "")),
            state=str(state).upper(),
            reason=str(raw.get("state_reason", "") or ""),
            nodes=str(raw.get("nodes", "") or ""),
            exit_code=_exit_code(raw.get("exit_code")),
            comment=str(raw.get("comment", "") or ""),
            restarts=_number(raw.get("restart_cnt")) or 0,
        )


def _described(errors: list[dict[str, Any]], response: httpx.Response) -> str:
    found = "; ".join(str(e.get("error") or e.get("description") or e) for e in errors)
    return found or response.text[:300]


def _number(value: Any) -> int | None:
    """A number of either schema: plain, or `{"set": bool, "infinite": bool, "number": n}`."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    return int(value)


def _exit_code(value: Any) -> int | None:
    if isinstance(value, Mapping) and "return_code" in value:  # v0.0.39+
        return _number(value["return_code"])
    return _number(value)


def _node(raw: Mapping[str, Any]) -> SlurmNode:
    state = raw.get("state", "")
    if isinstance(state, list):
        state = "+".join(state)
    flags = raw.get("state_flags") or []
    text = "+".join([str(state), *map(str, flags)]).lower()
    return SlurmNode(
        name=str(raw["name"]),
        state=text,
        cpus=_number(raw.get("cpus")) or 0,
        alloc_cpus=_number(raw.get("alloc_cpus")) or 0,
        gpus=_gpus(str(raw.get("gres", "") or "")),
        memory_mb=_number(raw.get("real_memory")) or 0,
        partitions=tuple(raw.get("partitions") or ()),
        reason=str(raw.get("reason", "") or ""),
        address=str(raw.get("address", "") or ""),
    )


_GRES_GPU = re.compile(r"gpu(?::[^:,(]+)?:(\d+)")


def _gpus(gres: str) -> int:
    """GPUs in a gres string such as `gpu:a100:4(S:0-1),shard:8`."""
    return sum(int(m.group(1)) for m in _GRES_GPU.finditer(gres))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))
