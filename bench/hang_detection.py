"""How long after a rank hangs the platform says so, against the job's hang timeout: one rank
of a 2-rank job is stopped (SIGSTOP, as a rank stuck in a driver call or a collective would
be) mid-step, again on each restarted attempt; measured from the stop to the `hung` event.

    python -m bench.hang_detection --hangs 5 --timeout 10

Embedded fleet (SQLite + files), one node of 2 CPU slots, digits on 2 gloo ranks; the node
agent's pass period (its sync interval) bounds how late after the timeout it can notice.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet


def rank_pid(job_id: str, attempt: int, rank: int) -> int | None:
    """The pid of one rank (not torchrun) of the attempt, by its run folder and RANK."""
    folder = f"{job_id}/attempt-{attempt}/".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if folder not in (proc / "cmdline").read_bytes():
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LOCAL_WORLD_SIZE=2" in environ:
            return int(proc.name)
    return None


def hung_events(fleet: Fleet, job_id: str) -> int:
    items = fleet.http.get(f"/v1/jobs/{job_id}/events", params={"limit": 500}).json()["items"]
    return sum(1 for e in items if e["reason"] == "hung")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hangs", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=10, help="monitoring.hang_timeout_s")
    args = parser.parse_args()
    delays: list[float] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_fleet(
            Path(tmp), "embedded", extra_env={"AMPFLEET_CORDON_AFTER_HANGS": "0"}
        ) as fleet,
    ):
        job_id = fleet.submit(
            job_spec(
                stop={"max_steps": 100_000},
                checkpoint={"every_steps": 50},
                log_every_steps=10,
                retry={"max_restarts": args.hangs},
                monitoring={"hang_timeout_s": args.timeout},
            )
        )["id"]
        deadline = time.monotonic() + 60 * 30
        for hang in range(args.hangs):
            attempt = hang + 1
            while time.monotonic() < deadline:  # this attempt's ranks training
                job = fleet.job(job_id)
                pid = rank_pid(job_id, attempt, 1)
                running = job["attempt"] == attempt and job["state"] == "RUNNING"
                if running and pid and job["progress"]["step"] >= 20 * attempt:
                    break
                time.sleep(0.5)
            else:
                raise SystemExit("the job did not get back to training in time")
            assert pid is not None
            subprocess.run(["kill", "-STOP", str(pid)], check=True)
            stopped = time.monotonic()
            while hung_events(fleet, job_id) <= hang and time.monotonic() < deadline:
                time.sleep(0.2)
            delays.append(time.monotonic() - stopped)
            print(
                f"hang {attempt}: reported {delays[-1]:.1f}s after the stop "
                f"(timeout {args.timeout}s, {delays[-1] - args.timeout:+.1f}s)",
                flush=True,
            )
        fleet.http.post(f"/v1/jobs/{job_id}/cancel")
    median = statistics.median(delays)
    print(
        f"median of {len(delays)} hangs: reported {median:.1f}s after the stop with a "
        f"{args.timeout}s hang timeout ({median / args.timeout:.2f}x; range "
        f"{min(delays):.1f}-{max(delays):.1f}s)"
    )


if __name__ == "__main__":
    main()
