"""A sandbox that was started before its attempt (workers/warm_sandbox.py) gets the attempt's
folders as bubblewrap gives a cold one at its start (workers/sandbox_mounts.py): the code
readable and unwritable, the run folder written as the sandbox's uid, no other job's folder,
nothing its processes can unmount, nothing changed in the host's mount namespace, and the
attempt's memory limit on its cgroup (raised or lowered from the one it started with); a
target whose path a process in the sandbox could have planted is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampfleet.core.memory import MB
from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import Settings, get_settings
from ampfleet.workers.containment import Contained, UidPool
from ampfleet.workers.limits import RankLimits, TaskGroup
from ampfleet.workers.local_launcher import Launch
from ampfleet.workers.sandbox_mounts import Bind, MountError, bind_into, mount_api_problem
from ampfleet.workers.warm_sandbox import WarmSandbox
from tests.support.env import environment

pytestmark = [
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
    pytest.mark.skipif(mount_api_problem() is not None, reason=str(mount_api_problem())),
]

# Stands in for the warm launcher: as the sandbox's uid, it plants a link in its /tmp, then
# waits for its launch on stdin, as the launcher does, and looks around.
PROBE = r"""
import ctypes, json, os, sys
from pathlib import Path

os.mkdir("/tmp/real")
os.symlink("/tmp/real", "/tmp/planted")
launch = json.loads(sys.stdin.readline())
run, code, other = Path(launch["run_dir"]), Path(sys.argv[1]), Path(sys.argv[2])

def attempt(action):
    try:
        return repr(action())
    except Exception as exc:
        return f"refused: {type(exc).__name__} {getattr(exc, 'errno', '')}"

libc = ctypes.CDLL(None, use_errno=True)
report = {
    "read code": attempt(lambda: (code / "recipe.py").read_text()),
    "write code": attempt(lambda: (code / "planted.py").write_text("x")),
    "write run": attempt(lambda: (run / "written.txt").write_text("x")),
    "other job": attempt(lambda: os.listdir(other)),
    "runs": os.listdir(run.parent.parent.parent),
    "unmount": libc.umount2(str(run).encode(), 2) == 0,
    "uid": os.getuid(),
}
(run / "report.json").write_text(json.dumps(report))
"""


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[Settings]:
    values = {
        "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        "AMPFLEET_SANDBOX_TMP_MB": "64",
    }
    with environment(values):
        yield get_settings()


@pytest.fixture
def sandbox(settings: Settings) -> Iterator[WarmSandbox]:
    data = settings.data_dir.resolve()
    code, other = data / "bundles" / "abc", data / "runs" / "job_other"
    code.mkdir(parents=True)
    (code / "recipe.py").write_text("recipe = 1\n")
    code.chmod(0o777)  # only the mount's being read-only keeps the sandbox from writing
    other.mkdir(parents=True)
    contained = Contained.prepare(
        settings,
        UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count),
        name=f"test-mounts-{os.getpid()}",
        nnodes=1,
        memory_mb=512,
        writable=[],
    )
    command = contained.command(
        [sys.executable, "-c", PROBE, str(code), str(other)],
        settings,
        writable=[],
        readable=[],
        devices=[],
    )
    process = subprocess.Popen(
        command,
        preexec_fn=contained.enter,  # noqa: PLW1509
        pass_fds=contained.pass_fds,
        stdin=subprocess.PIPE,
        start_new_session=True,
        env={"PATH": "/usr/bin:/bin", **contained.environment({})},
    )
    contained.launched()
    warm = WarmSandbox(contained, process)
    try:
        yield warm
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        contained.close()


def _wait_until_set_up(sandbox: WarmSandbox) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = sandbox.launcher_pid()
        if pid is not None and os.path.islink(f"/proc/{pid}/root/tmp/planted"):
            return pid
        time.sleep(0.05)
    raise AssertionError("the sandbox's process never started")


def test_a_running_sandbox_gets_its_attempt_s_folders_as_a_cold_one_would(
    settings: Settings, sandbox: WarmSandbox
) -> None:
    data = settings.data_dir.resolve()
    run, checkpoints = (
        data / "runs" / "job_a" / "attempt-1" / "node-0",
        data / "checkpoints" / "job_a",
    )
    code = data / "bundles" / "abc"
    pid = _wait_until_set_up(sandbox)
    host_mounts = Path("/proc/self/mountinfo").read_text()

    # A target under a path the sandbox's process could make is never followed.
    pidfd = os.pidfd_open(pid)
    try:
        with pytest.raises(MountError, match="leads elsewhere"):
            bind_into(pidfd, [Bind(str(code), "/tmp/planted/escape", "ro")])
    finally:
        os.close(pidfd)
    assert not Path(f"/proc/{pid}/root/tmp/real/escape").exists()

    launch = Launch(
        run_dir=str(run),
        procs=1,
        entry="unused",
        environment={},
        memory_limit_mb=None,
        log=str(run / "launcher.log"),
    )
    sandbox.admit(launch, readable=[code], writable=[run, checkpoints], memory_mb=768)
    assert sandbox.process.wait(timeout=60) == 0

    report = json.loads((run / "report.json").read_text())
    assert report["read code"] == repr("recipe = 1\n")
    assert report["write code"] == "refused: OSError 30"  # EROFS
    assert report["write run"] == "1"
    assert report["other job"].startswith("refused")  # not in its namespace at all
    assert report["runs"] == ["job_a"]
    assert report["unmount"] is False
    assert report["uid"] == sandbox.contained.uid
    assert (run / "written.txt").stat().st_uid == sandbox.contained.uid
    assert not (code / "planted.py").exists()
    assert Path("/proc/self/mountinfo").read_text() == host_mounts
    memory = sandbox.contained.tasks.memory
    if memory is not None:  # a node without a memory cgroup has the rlimits only
        limit = "memory.max" if (memory / "memory.max").exists() else "memory.limit_in_bytes"
        assert int((memory / limit).read_text()) == 768 * MB


def test_a_memory_limit_moves_either_way_once_the_attempt_is_known() -> None:
    limits = RankLimits(max_tasks=64, max_open_files=256, max_memory_bytes=512 * MB)
    group = TaskGroup(f"test-limit-{os.getpid()}", limits)
    if group.memory is None:
        pytest.skip("no memory cgroup can be made on this node")
    try:
        for mb in (2048, 256, 1024):  # v1 takes memory + swap only at or above memory
            group.limit_memory(mb * MB)
            files = ("memory.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
            held = [
                int((group.memory / f).read_text()) for f in files if (group.memory / f).exists()
            ]
            assert held
            assert set(held) == {mb * MB}
            assert group.limits.max_memory_bytes == mb * MB  # what its events will say
    finally:
        group.remove()
