"""`ampfleet doctor`: checks on this node that the sandbox holds, by trying from inside it
what a hostile tenant would (sandbox_probe.py), launched exactly as ranks are: the same
uid, cgroups, seccomp program, network namespace and folders (containment.py).

Each check says what was tried, whether it held, and what happened. A node where one does
not hold should not run other people's code: the command exits 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import Settings
from ampfleet.workers.containment import Contained, UidPool

PROBE_HEADROOM_MB = 512
"""The probe attempt's memory limit beyond its /tmp (whose pages count as memory too); its
shared mapping asks for more than the limit."""


@dataclass(frozen=True)
class Check:
    name: str
    held: bool
    detail: str


def control_plane(settings: Settings) -> list[tuple[str, int]]:
    """The addresses a rank must not reach: the database, the broker, the API, the object
    store, and every TCP port this host listens on (from /proc/net/tcp, at most 50)."""
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
    found += _listening()[:50]
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


def probe(settings: Settings, request: dict[str, object], *, nnodes: int = 1) -> dict[str, str]:
    """Runs the probe in a sandbox of a one-rank attempt of its own; what it reported."""
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
                env={"PATH": "/usr/bin:/bin", **contained.environment()},
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
    return checks


def _installation_in_root() -> list[str]:
    """What /root holds in the sandbox: the first folders of the installation bound back."""
    from ampfleet.core.sandbox import installation_under

    root = Path("/root")
    names = {p.relative_to(root).parts[0] for p in installation_under([root])}
    return sorted(names)[:5]


def _refused(found: dict[str, str], probe_name: str, check: str) -> Check:
    said = found.get(probe_name, "not tried")
    return Check(check, said.startswith("refused"), said)
