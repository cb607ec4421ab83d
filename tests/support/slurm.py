"""A real Slurm cluster of the test's own: munge, slurmctld, slurmd(s) and slurmrestd.

Started from Debian's packages (`make slurm-deps`), nothing installed or configured
system-wide: a generated slurm.conf and cgroup.conf, its own munge daemon, key and socket,
state and spool folders, all in one temporary folder, on free ports. The controller and the
node daemons run as root (SlurmUser=root), so that jobs may run as root, as an ampfleet node
agent does. slurmrestd listens on a unix socket with local auth (`start_cluster` says why
not JWT, and as which user it runs); nothing listens beyond loopback and the bed.

Two nodes, two ways (`cluster_for_tests` picks): on the multi-host network bed
(tests/support/netbed.py), each slurmd in a host namespace of its own with the host's
address as its NodeAddr and slurmctld on the bed's root address, so that the job's ranks and
agents talk across the bed's links as between machines (the fleet's services must then
listen on `service_address`); else two node daemons on loopback (`slurmd -N node1`, `-N
node2`, each on its own port). Where neither can start, one node, and `fewer_nodes` says
why: a test that needs two nodes skips with it. Every daemon is stopped on `close()`, at the
end of the `with`, and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.netbed import NetworkBed, NetworkBedUnavailableError, network_bed
from tests.support.ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol", "sbatch", "squeue")
PARTITION = "ampfleet"
POOL = "hpc"
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


NODE_MARK = "AMPFLEET_TEST_SLURM_NODE"
"""In each slurmd's environment, and so in its slurmstepds': which node of which cluster a
process is of (other clusters, of other tests, may run beside it)."""
NODE_CREDENTIALS = (
    "AMPFLEET_DATABASE_URL",
    "AMPFLEET_BROKER_URL",
    "AMPFLEET_S3_ACCESS_KEY_ID",
    "AMPFLEET_S3_SECRET_ACCESS_KEY",
)
"""What an operator puts in the compute nodes' settings file: what the batch job never
carries (scheduler/slurm/environment.py)."""


@dataclass
class SlurmCluster:
    root: Path
    node_names: list[str]
    cpus_per_node: int
    socket_path: Path
    bed: NetworkBed | None = None
    """The network bed whose hosts the nodes are (node i on host i), or None: loopback."""
    fewer_nodes: str | None = None
    """Why the cluster has fewer nodes than asked for; None when it has them all."""
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _node_daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _node_env: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def controller_address(self) -> str:
        return self.bed.root_address if self.bed else "127.0.0.1"

    service_address = controller_address
    """Where services the jobs' agents reach (the fleet's database, broker) must listen."""

    def node_address(self, index: int) -> str:
        return self.bed.address(index) if self.bed else "127.0.0.1"

    def need_nodes(self, count: int) -> str | None:
        """Why a test of `count` nodes cannot run on this cluster; None when it can."""
        if len(self.node_names) >= count:
            return None
        return f"the Slurm cluster has {len(self.node_names)} node(s): {self.fewer_nodes}"

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

    def state_files(self) -> list[Path]:
        """Every file of slurmctld's state folder: where it keeps each job's batch script
        and environment, as administrators and backups see them."""
        return [p for p in (self.root / "state").rglob("*") if p.is_file()]

    # -- nodes that fail --------------------------------------------------------------------

    def kill_node(self, name: str) -> list[int]:
        """Kill node `name` outright, as a power failure would: its slurmd, its slurmstepds
        and everything they started (the jobs' agents and ranks there). The pids killed."""
        daemon = self._node_daemons.get(name)
        if daemon is None:
            raise KeyError(name)
        doomed = set(self._node_processes(name))
        doomed.add(daemon.pid)
        for pid in sorted(doomed):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        daemon.wait(timeout=30)
        return sorted(doomed)

    def _node_processes(self, name: str) -> list[int]:
        index = self.node_names.index(name)
        if self.bed is not None:  # a host of the bed: everything in its namespace
            out = subprocess.run(
                ["ip", "netns", "pids", self.bed.namespace(index)],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            return [int(pid) for pid in out.split()]
        # On loopback: its slurmd and slurmstepds, marked in their environment as this
        # cluster's, and everything under them (the jobs' processes).
        mark = f"{NODE_MARK}={self._node_mark(name)}".encode()
        found: set[int] = set()
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if mark in (Path("/proc") / str(proc.pid) / "environ").read_bytes().split(b"\0"):
                    found.add(proc.pid)
                    found.update(child.pid for child in proc.children(recursive=True))
        found.discard(os.getpid())
        return sorted(found)

    def _node_mark(self, name: str) -> str:
        return f"{self.root}/{name}"

    def start_node(self, name: str) -> None:
        """(Re)start node `name`'s slurmd, as a node coming back after a failure."""
        index = self.node_names.index(name)
        args = [_which("slurmd"), "-D"]
        if len(self.node_names) > 1:
            args += ["-N", name]
        if self.bed is not None:
            args = self.bed.command(index, args)
        env = {**self._node_env, NODE_MARK: self._node_mark(name)}
        process = _spawn(self, f"slurmd-{name}", args, env)
        self._node_daemons[name] = process
        self._processes.append(process)

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
        # slurmstepd (and the jobs' processes under it) outlive a stopped slurmd.
        for name in self.node_names:
            for pid in self._node_processes(name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
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


_started: list[SlurmCluster] = []


@atexit.register
def _stop_all() -> None:
    for cluster in list(_started):
        cluster.close()


@contextlib.contextmanager
def cluster_for_tests(*, rest_as_root: bool = True) -> Iterator[SlurmCluster]:
    """Two nodes on the network bed where this process can build one, else two on loopback,
    else one; `SlurmCluster.fewer_nodes` says why it has fewer than two."""
    with contextlib.ExitStack() as stack:
        why: list[str] = []
        try:
            bed = stack.enter_context(network_bed(2))
        except NetworkBedUnavailableError as error:
            bed = None
            why.append(f"no network bed ({error})")
        attempts = [(2, bed), (2, None), (1, None)] if bed else [(2, None), (1, None)]
        for nodes, on_bed in attempts:
            try:
                cluster = start_cluster(nodes, bed=on_bed, rest_as_root=rest_as_root)
            except RuntimeError as error:
                why.append(
                    f"{nodes} node(s) {'on the bed' if on_bed else 'on loopback'} did "
                    f"not start: {str(error).splitlines()[0]}"
                )
                continue
            cluster.fewer_nodes = "; ".join(why) if nodes < 2 else None
            stack.callback(cluster.close)
            yield cluster
            return
        raise RuntimeError("no Slurm cluster could start: " + "; ".join(why))


def start_cluster(
    nodes: int = 2,
    *,
    bed: NetworkBed | None = None,
    extra_env: dict[str, str] | None = None,
    rest_as_root: bool = True,
) -> SlurmCluster:
    """Start a cluster of `nodes` node daemons: on the hosts of `bed` (node i on host i),
    else on loopback (`slurmd -N`); raises RuntimeError where they cannot start (this build
    of slurmd may not run several on one host). `extra_env`: variables the node daemons
    (and so the jobs' steps) inherit.

    `rest_as_root`: slurmrestd with local auth submits as its own uid, and jobs run as the
    user who submitted them. 22.05's controller has no JWT plugin (auth/jwt is not packaged),
    so the one way here for jobs to run as root, as an ampfleet node agent does, is the REST
    daemon running as root (SLURMRESTD_SECURITY=disable_user_check). False: as `slurm`,
    the way a site runs it, whose jobs then run as `slurm`."""
    problem = slurm_problem()
    if problem:
        raise RuntimeError(problem)
    if bed is not None and bed.hosts < nodes:
        raise RuntimeError(f"a bed of {bed.hosts} hosts cannot hold {nodes} nodes")
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
        bed=bed,
    )
    _started.append(cluster)
    try:
        _write_config(cluster)
        env = {**os.environ, **(extra_env or {}), "SLURM_CONF": str(cluster.conf)}
        cluster._node_env = env
        _start_munge(cluster)
        cluster._processes.append(
            _spawn(cluster, "slurmctld", [_which("slurmctld"), "-D", "-i"], env)
        )
        for name in names:
            cluster.start_node(name)
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
            f"NodeName={name} NodeHostname={host} NodeAddr={cluster.node_address(i)} "
            f"Port={port} CPUs={cluster.cpus_per_node} RealMemory=1000 State=UNKNOWN"
        )
    cluster.conf.write_text(
        "\n".join(
            [
                "ClusterName=ampfleet",
                f"SlurmctldHost={host}({cluster.controller_address})",
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
                "KillWait=15",  # the agents ask scontrol why they were signalled
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


def write_node_settings(path: Path, fleet_env: Mapping[str, str]) -> Path:
    """The compute nodes' settings file an operator writes (mode 0600): the credentials of
    `fleet_env` (a fleet's environment) that the batch jobs never carry."""
    lines = [f"{name}={fleet_env[name]}" for name in NODE_CREDENTIALS if fleet_env.get(name)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("\n".join(lines) + "\n")
    return path


def slurm_fleet_env(cluster: SlurmCluster, root: Path, *, url: str | None = None) -> dict[str, str]:
    """A fleet's variables for a Slurm pool `POOL` on `cluster` (through `url`, else its
    slurmrestd): its node settings file (written by `write_node_settings` once the fleet's
    credentials are known) and the batch jobs' output folder under `root`."""
    output = root / "slurm-output"
    output.mkdir(parents=True, exist_ok=True)
    return {
        "AMPFLEET_SLURM_POOL": POOL,
        "AMPFLEET_SLURM_URL": url or f"unix:{cluster.socket_path}",
        "AMPFLEET_SLURM_PARTITION": PARTITION,
        "AMPFLEET_SLURM_TIME_MARGIN_S": "60",
        "AMPFLEET_SLURM_NODE_SETTINGS_FILE": str(root / "node-settings.env"),
        "AMPFLEET_SLURM_OUTPUT_DIR": str(output),
        "SLURM_CONF": str(cluster.conf),
        "AMPFLEET_SANDBOX": "none",
    }
