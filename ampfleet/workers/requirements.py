"""A job's `code.requirements`, installed once per node and requirement set into an
environment layered over the worker's own.

The environment is a virtualenv whose site-packages also reads the worker's (a `.pth` file),
so torch, ampfleet and the rest stay the worker's: the worker's torch is pinned for pip as
a constraint, and what the job asks for is added on top. It is built by the node agent,
never by a rank, into a hidden folder renamed into place when pip has finished, under
`<data dir>/envs/<key>/` where the key covers the requirements, the pip options, the
interpreter and the worker's torch; ranks see it read-only, so one job cannot change what
another job with the same requirements runs.

Each requirement is checked again here, by the rule the API applied at submit
(core/requirements.py: names and versions only, no URL, path or pip option), before pip sees
it. pip runs inside the sandbox where there is one (only the new environment writable, no GPU
device bound), and always with `--only-binary=:all:`, after the operator's options
(AMPFLEET_PIP_ARGS) so that none of them (`--no-binary`, `--no-build-isolation`) undoes it:
building a source distribution would run its setup code on the node. Where every index is
local (`--no-index --find-links /wheels`, `file://`), pip's sandbox has no network at all;
otherwise its uid reaches only the index's addresses and port, and DNS, while it installs
(egress.py), or pip does not run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import urlsplit

from ampfleet.core.requirements import requirement_problem
from ampfleet.core.sandbox import Confinement, give_to, open_to_sandboxes, sandboxed
from ampfleet.core.settings import Settings
from ampfleet.workers import egress

WORKER_LAYER = "_ampfleet_worker.pth"
PIP_TIMEOUT_S = 1800
OUTPUT_EVERY_S = 1.0
# Last on pip's command line: of its format options, the last one given wins.
WHEELS_ONLY = ("--only-binary=:all:",)
PYPI = ("https://pypi.org/simple", "https://files.pythonhosted.org")
"""pip's index when told none; PyPI serves the files its pages link from the second host."""
WHERE_OPTIONS = {
    "--index-url": "index",
    "-i": "index",
    "--extra-index-url": "extra",
    "--find-links": "links",
    "-f": "links",
    "--proxy": "proxy",
}


class RequirementsError(RuntimeError):
    """pip did not install the set; the message carries pip's own error lines (its whole
    output is in the job's logs already)."""


def pip_options(settings: Settings) -> list[str]:
    return [*shlex.split(settings.pip_args), *WHEELS_ONLY]


def env_dir(settings: Settings, requirements: Sequence[str]) -> Path:
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "none"
    key = json.dumps(
        {
            "requirements": sorted(requirements),
            "pip": pip_options(settings),
            "python": sys.version,
            "worker": site.getsitepackages(),
            "torch": torch_version,
        },
        sort_keys=True,
    )
    return settings.data_dir.resolve() / "envs" / hashlib.sha256(key.encode()).hexdigest()[:32]


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def ensure_env(
    settings: Settings,
    requirements: Sequence[str],
    on_output: Callable[[list[str]], None] | None = None,
) -> Path:
    """The environment for `requirements` on this node, built if not there yet (pip's
    output to `on_output` as it comes); raises RequirementsError with pip's output, or
    naming a requirement that is not a name and version (pip never sees that set)."""
    for requirement in requirements:
        if (problem := requirement_problem(requirement)) is not None:
            raise RequirementsError(f"code.requirements refused: {problem}")
    target = env_dir(settings, requirements)
    if env_python(target).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".incoming-") as incoming:
        partial = Path(incoming) / "env"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(partial)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        _layer_over_worker(partial)
        with network_for_pip(settings):
            _pip_install(settings, partial, requirements, Path(incoming), on_output)
        open_to_sandboxes(partial)  # ranks read it as unprivileged uids
        try:
            partial.rename(target)
        except OSError:
            if not env_python(target).exists():  # not another job's build of the same set
                raise
            shutil.rmtree(partial, ignore_errors=True)
    return target


def _site_packages(env: Path) -> Path:
    version_dir = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return env / "lib" / version_dir / "site-packages"


def _layer_over_worker(env: Path) -> None:
    """The environment reads the worker's packages after its own: `addsitedir`, not a bare
    path, so the worker's own .pth files (an editable install, namespace packages) count."""
    folders = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = [f"import site; site.addsitedir({folder!r})" for folder in folders]
    (_site_packages(env) / WORKER_LAYER).write_text("\n".join(lines) + "\n")


def _pip_install(
    settings: Settings,
    env: Path,
    requirements: Sequence[str],
    scratch: Path,
    on_output: Callable[[list[str]], None] | None,
) -> None:
    """pip's output is handed to `on_output` as it comes (a batch at most every second)."""
    command = pip_command(settings, env, requirements, scratch)
    environment = {"PATH": "/usr/bin:/bin", "PIP_NO_CACHE_DIR": "1", "HOME": str(scratch)}
    output: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment
    ) as pip:
        timer = threading.Timer(PIP_TIMEOUT_S, pip.kill)
        timer.start()
        try:
            stdout = pip.stdout
            if stdout is None:
                raise RuntimeError("pip's output was not captured")
            pending: list[str] = []
            sent = time.monotonic()
            for raw in stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                output.append(line)
                pending.append(line)
                if on_output is not None and time.monotonic() - sent >= OUTPUT_EVERY_S:
                    on_output(pending)
                    pending, sent = [], time.monotonic()
            if on_output is not None and pending:
                on_output(pending)
        finally:
            timer.cancel()
    if pip.returncode != 0:
        said = [line for line in output if line.startswith("ERROR")] or output[-5:]
        raise RequirementsError("code.requirements did not install: " + " ".join(said)[-1000:])


def pip_command(
    settings: Settings, env: Path, requirements: Sequence[str], scratch: Path
) -> list[str]:
    """pip's command line for installing `requirements` into `env`, sandboxed where the
    node sandboxes: its files (constraints, requirements) written into `scratch`."""
    constraints = scratch / "constraints.txt"
    try:
        constraints.write_text(f"torch=={version('torch')}\n")
    except PackageNotFoundError:
        constraints.write_text("")
    requirements_file = scratch / "requirements.txt"
    requirements_file.write_text("\n".join(requirements) + "\n")
    command = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(env_python(env)),
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar=off",
        "-c",
        str(constraints),
        "-r",
        str(requirements_file),
        *pip_options(settings),
    ]
    if settings.sandbox != "bubblewrap":
        return command
    give_to(scratch, settings.sandbox_first_uid)  # pip runs as the installer uid
    return sandboxed(
        command,
        data_dir=settings.data_dir.resolve(),
        writable=[scratch],
        readable=_local_folders(pip_options(settings)),
        devices=[],  # pip and a wheel's install need no GPU
        # An index on the network: the host's, under the egress filter (network_for_pip).
        confinement=Confinement(
            uid=settings.sandbox_first_uid,
            own_network=not index_endpoints(pip_options(settings)),
        ),
    )


def index_endpoints(options: Sequence[str]) -> list[tuple[str, int]]:
    """The hosts and ports pip connects to, given `options`: the proxy's, or each remote
    index's and link page's; none where each is a local path or `file://` (pip's sandbox
    then has no network at all)."""
    given: dict[str, list[str]] = {kind: [] for kind in set(WHERE_OPTIONS.values())}
    words = iter(options)
    for word in words:
        name, equals, value = word.partition("=")
        if name in WHERE_OPTIONS:
            given[WHERE_OPTIONS[name]].append(value if equals else next(words, ""))
        elif word[:2] in ("-i", "-f") and len(word) > 2:  # -ihttps://...
            given[WHERE_OPTIONS[word[:2]]].append(word[2:])
    if "--no-index" in options:
        sources = given["links"]
    else:
        sources = [*(given["index"][-1:] or PYPI), *given["extra"], *given["links"]]
    remote = [found for found in map(_remote, sources) if found is not None]
    if remote and given["proxy"]:
        proxy = _remote(given["proxy"][-1], proxy=True)
        return [proxy] if proxy else []
    return list(dict.fromkeys(remote))


def _remote(url: str, *, proxy: bool = False) -> tuple[str, int] | None:
    """A URL's host and port, where it is on the network (http, https; a proxy's also
    socks, and pip takes one without a scheme)."""
    parts = urlsplit(url if "://" in url or not proxy else f"http://{url}")
    known = {"http": 80, "https": 443}
    if not parts.hostname or (parts.scheme not in known and not proxy):
        return None
    return parts.hostname, parts.port or known.get(parts.scheme, 1080)


@contextlib.contextmanager
def network_for_pip(settings: Settings) -> Iterator[None]:
    """While pip installs: its uid reaches the index's addresses (resolved now) and port,
    and the resolvers, and nothing else of the host's network; with a local index it has
    none at all (pip_command). Where the filter cannot be set, pip does not run."""
    endpoints = index_endpoints(pip_options(settings))
    if settings.sandbox != "bubblewrap" or not endpoints:
        yield  # unconfined by the operator's choice, or in a network namespace of its own
        return
    where = ", ".join(f"{host}:{port}" for host, port in endpoints)
    if (problem := egress.problem()) is not None:
        raise RequirementsError(
            f"code.requirements need the index on the network ({where}), which pip's "
            f"sandbox reaches only under the egress filter, and this node cannot set it: "
            f"{problem}"
        )
    try:
        allowed = egress.to_index(endpoints)
    except egress.EgressError as exc:
        raise RequirementsError(f"code.requirements cannot reach the index: {exc}") from exc
    egress.hold(settings.sandbox_first_uid, allowed)
    try:
        yield
    finally:
        egress.release(settings.sandbox_first_uid)


def _local_folders(options: list[str]) -> list[Path]:
    """Local paths the pip options name (`--find-links /wheels`, `file:///...` indexes):
    readable in the sandbox, whose /tmp is its own."""
    found = []
    for option in options:
        value = option.partition("=")[2] if option.startswith("--") else option
        path = Path(value.removeprefix("file://"))
        if path.is_absolute() and path.exists():
            found.append(path)
    return found
