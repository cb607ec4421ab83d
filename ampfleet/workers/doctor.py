"""`ampfleet doctor`: checks on this node that the sandbox holds, by trying from inside it
what a hostile tenant would (sandbox_probe.py), launched exactly as ranks are: the same
uid, cgroups, seccomp program, network namespace and folders (containment.py).

A multi-node attempt's ranks keep the host's network under the egress filter of their uid
(egress.py): launched as one, the probe must connect to a peer's ephemeral port, and to
nothing else (a loopback listener, the control plane).

Each check says what was tried, whether it held, and what happened. A node where one does
not hold should not run other people's code: the command exits 1.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import Settings
from ampfleet.workers import egress
from ampfleet.workers.containment import Contained, UidPool

PROBE_HEADROOM_MB = 512
"""The probe attempt's memory limit beyond its /tmp (whose pages count as memory too); its
shared mapping asks for more than the limit."""


@dataclass(frozen=True)
class Check:
    name: str
    held: bool
    detail: str


def control_plane(settings: Settings, *, listening: bool = True) -> list[tuple[str, int]]:
    """The addresses a rank must not reach: the database, the broker, the API, the object
    store, and (`listening`) every TCP port this host listens on (from /proc/net/tcp, at
    most 50)."""
    found: list[tuple[str, int]] = []
    for url, default in (
        (settings.effective_database_url, 5432),
        (settings.broker_url, 6379),
        (settings.s3_endpoint_url or "", 443),
    ):
        parts = urlsplit(url)
        if parts.hostname:
            found.append((parts.hostname, parts.port or default))
    found.append(("127.0.0.1", settings.api_port))
    found += _listening()[:50] if listening else []
    return list(dict.fromkeys(found))


def _listening() -> list[tuple[str, int]]:
    listening = []
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # LISTEN
            port = int(fields[1].rsplit(":", 1)[1], 16)
            listening.append(("127.0.0.1", port))
    return listening


def probe_memory_mb(settings: Settings) -> int:
    return settings.sandbox_tmp_mb + PROBE_HEADROOM_MB


def probe(
    settings: Settings,
    request: dict[str, object],
    *,
    nnodes: int = 1,
    peers: tuple[str, ...] = (),
) -> dict[str, str]:
    """Runs the probe in a sandbox of a one-rank attempt of its own (of `nnodes` nodes at
    `peers`); what it reported."""
    pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
    settings.data_dir.resolve().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.data_dir.resolve(), prefix=".doctor-") as tmp:
        run_dir, checkpoints = Path(tmp) / "run", Path(tmp) / "checkpoints"
        contained = Contained.prepare(
            settings,
            pool,
            name=f"doctor-{Path(tmp).name}",
            nnodes=nnodes,
            memory_mb=probe_memory_mb(settings),
            writable=[run_dir, checkpoints],
            peers=peers,
        )
        try:
            command = [
                sys.executable,
                "-m",
                "ampfleet.workers.sandbox_probe",
                json.dumps({**request, "writable": str(run_dir)}),
            ]
            sandboxed = contained.command(
                command, settings, writable=[run_dir, checkpoints], readable=[], devices=[]
            )
            done = subprocess.run(
                sandboxed,
                check=False,
                preexec_fn=contained.enter,
                pass_fds=contained.pass_fds,
                capture_output=True,
                timeout=300,
                env={"PATH": "/usr/bin:/bin", **contained.environment({})},
            )
        finally:
            contained.close()
    if done.returncode != 0:
        said = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
        raise RuntimeError(f"the probe exited with {done.returncode}: {said}")
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


def check_node(settings: Settings) -> list[Check]:
    """Every check of this node's sandbox, as `ampfleet doctor` prints them."""
    problem = bubblewrap_problem()
    if problem is not None:
        return [Check("bubblewrap runs", False, problem)]
    secrets = [
        settings.data_dir.resolve() / "admin.key",
        Path("/etc/shadow"),
        Path("/proc/1/environ"),
    ]
    targets = control_plane(settings)
    found = probe(
        settings,
        {
            "read": [str(p) for p in secrets],
            "list": ["/root", str(settings.data_dir.resolve())],
            "connect": targets,
            "tmp_mb": settings.sandbox_tmp_mb + 16,
            "shared_mb": probe_memory_mb(settings) + 256,
        },
    )
    checks = [Check("runs as an unprivileged uid", found["uid"] != "0", f"uid {found['uid']}")]
    for path in secrets:
        said = found[f"read {path}"]
        checks.append(Check(f"cannot read {path}", said.startswith("refused"), said))
    said = found["list /root"]
    shown = said.startswith("refused") or said == f"done: {_installation_in_root()!r}"
    checks.append(Check("/root shows nothing but the worker's interpreter", shown, said))
    for host, port in targets:
        checks.append(_refused(found, f"connect {host}:{port}", f"cannot connect to {host}:{port}"))
    for name in ("new user namespace", "ptrace", "mount"):
        checks.append(_refused(found, name, f"no {name} (seccomp)"))
    bound = f"its /tmp holds at most {settings.sandbox_tmp_mb} MB"
    checks.append(_refused(found, "fill /tmp", bound))
    shared = found["shared memory"]
    checks.append(
        Check(
            f"shared memory counts against a {probe_memory_mb(settings)} MB memory limit",
            shared.startswith("killed"),
            shared,
        )
    )
    return checks + egress_checks(settings)


def egress_checks(settings: Settings) -> list[Check]:
    """A multi-node rank, its node its only peer, connects to a listener on the node's
    address at an ephemeral port, and not to one on loopback below that range, nor to the
    control plane."""
    if (problem := egress.problem()) is not None:
        detail = f"this node refuses multi-node bundled attempts: {problem}"
        return [Check("multi-node ranks run only under the egress filter", True, detail)]
    address = str(min(egress.addresses_of(settings.node_address), key=str))
    first, _ = egress.ephemeral_ports()
    below = range(first - 1, 1023, -1)  # where services listen
    with _listener(address, [0]) as peer, _listener("127.0.0.1", below) as low:
        refused = [low, *control_plane(settings, listening=False)]
        try:
            found = probe(
                settings, {"connect": [peer, *refused]}, nnodes=2, peers=(settings.node_address,)
            )
        except egress.EgressError as exc:  # its uid filtered by a running worker, say
            return [Check("the egress filter of a multi-node rank can be set", False, str(exc))]
    said = found[f"connect {peer[0]}:{peer[1]}"]
    reached = f"a multi-node rank reaches its peer {peer[0]}:{peer[1]} (ephemeral port)"
    checks = [Check(reached, said == "done: 'connected'", said)]
    for host, port in refused:
        checks.append(
            _refused(
                found,
                f"connect {host}:{port}",
                f"a multi-node rank cannot connect to {host}:{port}",
            )
        )
    return checks


@contextlib.contextmanager
def _listener(host: str, ports: Iterable[int]) -> Iterator[tuple[str, int]]:
    """A TCP listener on `host` at the first of `ports` that is free (0: one the kernel
    picks, in its ephemeral range)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        for port in ports:
            with contextlib.suppress(OSError):
                server.bind((host, port))
                break
        else:
            raise RuntimeError(f"no port free on {host} among those tried")
        server.listen()
        yield host, int(server.getsockname()[1])


def _installation_in_root() -> list[str]:
    """What /root holds in the sandbox: the first folders of the installation bound back."""
    from ampfleet.core.sandbox import installation_under

    root = Path("/root")
    names = {p.relative_to(root).parts[0] for p in installation_under([root])}
    return sorted(names)[:5]


def _refused(found: dict[str, str], probe_name: str, check: str) -> Check:
    said = found.get(probe_name, "not tried")
    return Check(check, said.startswith("refused"), said)
