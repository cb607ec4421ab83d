"""A real Slurm cluster of the test's own: munge, slurmctld, slurmd(s) and slurmrestd.

Started from Debian's packages (`make slurm-deps`), nothing installed or configured
system-wide: a generated slurm.conf and cgroup.conf, its own munge daemon, key and socket,
state and spool folders, all in one temporary folder, on free ports. The controller and the
node daemons run as root (SlurmUser=root), so that jobs may run as root, as an ampfleet node
agent does. slurmrestd listens on a unix socket with local auth (`start_cluster` says why
not JWT, and as which user it runs); nothing listens beyond loopback.

Two node daemons on one machine (`slurmd -N node1`, `-N node2`, each on its own port) give
a real 2-node allocation; where they cannot start, the cluster is one node with every CPU
(`SlurmCluster.node_names` says which). Every daemon is stopped on `close()`, at the end of
the `with`, and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol", "sbatch", "squeue")
PARTITION = "ampfleet"
READY_WAIT_S = 60.0


def slurm_problem() -> str | None:
    """Why a Slurm cluster cannot be started here, or None when it can."""
    missing = [name for name in DAEMONS if shutil.which(name) is None and not _sbin(name)]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing; make slurm-deps)"
    if os.geteuid() != 0:
        return "the Slurm harness runs the controller and node daemons as root"
    try:
        pwd.getpwnam("slurm")
    except KeyError:
        return "there is no `slurm` user for slurmrestd (it refuses to run as root)"
    return None


def _sbin(name: str) -> str | None:
    path = Path("/usr/sbin") / name
    return str(path) if path.exists() else None


def _which(name: str) -> str:
    found = shutil.which(name) or _sbin(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed")
    return found


@dataclass
class SlurmCluster:
    root: Path
    node_names: list[str]
    cpus_per_node: int
    socket_path: Path
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """The environment Slurm's commands (squeue, scancel, srun) need for this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *args: str) -> str:
        done = subprocess.run(
            [_which(args[0]), *args[1:]],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def squeue_names(self) -> list[str]:
        """Names of the jobs Slurm has queued or running (its own view, not the REST one)."""
        out = self.command("squeue", "--noheader", "--format=%j")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def close(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self._processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()
        _stop_leftover_steps(self.root)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for log in sorted(self.root.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"== {log.name}\n" + "\n".join(text))
        return "\n".join(parts)


def _stop_leftover_steps(root: Path) -> None:
    """slurmstepd outlives a stopped slurmd; end the ones of this cluster's spool."""
    done = subprocess.run(
        ["pgrep", "-f", f"slurmstepd.*{root}"], capture_output=True, text=True, check=False
    )
    for pid in done.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)


_started: list[SlurmCluster] = []


@atexit.register
def _stop_all() -> None:
    for cluster in list(_started):
        cluster.close()


def start_cluster(
    nodes: int = 2, *, extra_env: dict[str, str] | None = None, rest_as_root: bool = True
) -> SlurmCluster:
    """`nodes` node daemons on this machine (`slurmd -N`); where this build of slurmd cannot
    run several, one node with every CPU. See `_start_cluster` for the rest."""
    try:
        return _start_cluster(nodes, extra_env=extra_env, rest_as_root=rest_as_root)
    except RuntimeError:
        if nodes == 1:
            raise
    return _start_cluster(1, extra_env=extra_env, rest_as_root=rest_as_root)


def _start_cluster(
    nodes: int, *, extra_env: dict[str, str] | None = None, rest_as_root: bool = True
) -> SlurmCluster:
    """Start a cluster of `nodes` node daemons. `extra_env`: variables the node daemons
    (and so the jobs' steps) inherit.

    `rest_as_root`: slurmrestd with local auth submits as its own uid, and jobs run as the
    user who submitted them. 22.05's controller has no JWT plugin (auth/jwt is not packaged),
    so the one way here for jobs to run as root, as an ampfleet node agent does, is the REST
    daemon running as root (SLURMRESTD_SECURITY=disable_user_check). False: as `slurm`,
    the way a site runs it, whose jobs then run as `slurm`."""
    problem = slurm_problem()
    if problem:
        raise RuntimeError(problem)
    root = Path(tempfile.mkdtemp(prefix="slurm-"))
    root.chmod(0o755)
    cpus = os.cpu_count() or 1
    names = [f"node{i + 1}" for i in range(nodes)]
    cpus_per_node = max(cpus // nodes, 1)
    rest_dir = root / "rest"
    rest_dir.mkdir()
    slurm = pwd.getpwnam("slurm")
    os.chown(rest_dir, slurm.pw_uid, slurm.pw_gid)
    cluster = SlurmCluster(
        root=root,
        node_names=names,
        cpus_per_node=cpus_per_node,
        socket_path=rest_dir / "slurmrestd.socket",
    )
    _started.append(cluster)
    try:
        _write_config(cluster)
        env = {**os.environ, **(extra_env or {}), "SLURM_CONF": str(cluster.conf)}
        _start_munge(cluster)
        cluster._processes.append(
            _spawn(cluster, "slurmctld", [_which("slurmctld"), "-D", "-i"], env)
        )
        for name in names:
            args = [_which("slurmd"), "-D"]
            if len(names) > 1:
                args += ["-N", name]
            cluster._processes.append(_spawn(cluster, f"slurmd-{name}", args, env))
        _wait_nodes_idle(cluster)
        cluster._processes.append(_start_rest(cluster, env, rest_as_root))
        _wait_socket(cluster)
    except BaseException as error:
        log = cluster.log_tail()
        cluster.close()
        _started.remove(cluster)
        raise RuntimeError(f"the Slurm cluster did not start ({error}):\n{log}") from None
    return cluster


def _write_config(cluster: SlurmCluster) -> None:
    root = cluster.root
    for sub in ("state", "munge", *(f"spool/{name}" for name in cluster.node_names)):
        (root / sub).mkdir(parents=True)
    ctld_port, first_node_port = free_port(), free_port()
    host = socket.gethostname()
    node_lines = []
    for i, name in enumerate(cluster.node_names):
        port = first_node_port if i == 0 else free_port()
        node_lines.append(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={cluster.cpus_per_node} RealMemory=1000 State=UNKNOWN"
        )
    cluster.conf.write_text(
        "\n".join(
            [
                "ClusterName=ampfleet",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
                "CredType=cred/munge",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}/%n",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd-%n.pid",
                f"SlurmctldLogFile={root}/slurmctld.log",
                f"SlurmdLogFile={root}/slurmd-%n.log",
                "SlurmctldDebug=info",
                "SlurmdDebug=info",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SchedulerType=sched/backfill",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                "JobAcctGatherType=jobacct_gather/none",
                "MpiDefault=none",
                "ReturnToService=2",
                "MinJobAge=600",
                "KillWait=5",
                "InactiveLimit=0",
                "SlurmdTimeout=30",
                *node_lines,
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    (root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n")


def _start_munge(cluster: SlurmCluster) -> None:
    folder = cluster.root / "munge"
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    subprocess.run(
        [
            _which("munged"),
            "--force",
            f"--key-file={key}",
            f"--socket={folder / 'munge.socket'}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--log-file={cluster.root / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}",
        ],
        check=True,
        capture_output=True,
    )
    pid = int((folder / "munged.pid").read_text())
    cluster._processes.append(_Adopted(pid))  # type: ignore[arg-type]


class _Adopted:
    """A daemon that forked itself away (munged): stopped by its pid file's pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 0
        return None

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 15)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout or 30)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("munged", timeout or 30)
            time.sleep(0.1)
        return 0


def _spawn(
    cluster: SlurmCluster, name: str, args: list[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    out = open(cluster.root / f"{name}.out.log", "wb")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_nodes_idle(cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline:
        try:
            out = cluster.command("sinfo", "--noheader", "--Node", "--format=%N %t")
        except RuntimeError:
            out = ""
        states = dict(line.split() for line in out.splitlines() if line.strip())
        if states and all(states.get(n, "").startswith("idle") for n in cluster.node_names):
            return
        time.sleep(0.3)
    raise RuntimeError("the Slurm nodes did not become idle")


def _start_rest(
    cluster: SlurmCluster, env: dict[str, str], as_root: bool
) -> subprocess.Popen[bytes]:
    slurm = pwd.getpwnam("slurm")
    rest_env = {**env, "SLURMRESTD_SECURITY": "disable_user_check"} if as_root else dict(env)
    out = open(cluster.root / "slurmrestd.log", "wb")  # noqa: SIM115 - the child keeps it

    def become_slurm() -> None:
        os.setgid(slurm.pw_gid)
        os.setgroups([])
        os.setuid(slurm.pw_uid)

    return subprocess.Popen(
        [
            _which("slurmrestd"),
            "-a",
            "rest_auth/local",
            "-s",
            "openapi/v0.0.38",
            f"unix:{cluster.socket_path}",
        ],
        env=rest_env,
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=None if as_root else become_slurm,  # noqa: PLW1509 - no threads of ours touch the fork
        cwd=cluster.root / "rest",
    )


def _wait_socket(cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline:
        if cluster.socket_path.exists():
            return
        if cluster._processes[-1].poll() is not None:
            raise RuntimeError("slurmrestd exited")
        time.sleep(0.1)
    raise RuntimeError("slurmrestd did not open its socket")
