"""Where the API process spends its interpreter under load: py-spy samples `ampfleet api`
(uvicorn, one process, as bench/api.py runs it) while 20 clients send POST /v1/jobs (or
GET /v1/jobs/{id}), and the samples are summed by what the request was doing.

    python -m bench.api_profile [--verb POST] [--seconds 20] [--rate 200] [--clients 20]
                                [--flame PATH]

Beside it, the same for bench/bare_app.py's `lean` route (exactly ours' statements and nothing
else), one after the other on the same database; the table is milliseconds of interpreter
per request, row by row, for both.

`--gil` sampling (py-spy's): only the thread holding the interpreter lock is sampled, so the
samples are the interpreter's time, whichever thread (the event loop, a threadpool thread)
holds it, and their number against seconds x rate is the share of the time the process
holds the lock at all. A sample goes to the first row of the request's work (WORK below) that
any frame of its stack matches (a database call inside admission is the database's), else to
the plumbing (PLUMBING) of its deepest frame: the middleware, the framework, the server, the
thread pool's hand-offs by themselves. `--flame` keeps the folded stacks (flamegraph.pl or
speedscope read them).

py-spy is a dev dependency; it attaches with ptrace (root, or ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.api import OURS, UVICORN, api_environment, cpu_seconds, load, server
from tests.support.factories import job_spec

# What a request does, each owning everything beneath it in the stack (a sample in the
# database driver under admission is the database's): the first row whose pattern matches
# any frame ("function (file:line)") of the sample's stack claims it.
WORK: list[tuple[str, re.Pattern[str]]] = [
    (row, re.compile(pattern))
    for row, pattern in (
        (
            "database: SQL compile, execute, driver",
            r"psycopg|sqlalchemy/(engine|sql|pool|dialects)",
        ),
        ("database: ORM session, flush, commit", r"sqlalchemy/orm/"),
        ("scheduler wake-up (broker publish)", r"core/messaging\.py|kombu/"),
        ("auth: per-key rate limit", r"api/ratelimit\.py|redis/"),
        ("auth: the key (cache, verify)", r"api/auth\.py|key_cache\.py|core/keys\.py"),
        ("request body: JobSpec validation", r"request_body_to_args|_validate_value_with_model"),
        ("request body: read, JSON parse", r"_get_body|Request\.json|Request\.body|json/decoder"),
        ("response: JobOut built, its JSON", r"to_out |json_response|serialize_response"),
        ("submit: its rules and rows", r"api/jobs/|core/job_creation|core/lifecycle|core/ids"),
        ("GET: the job, its goodput", r"api/goodput\.py|core/goodput\.py"),
        ("logging", r"/logging/|core/logs\.py"),
        ("lean: its own code", r"bench/bare_app\.py"),
    )
]
# The plumbing around the work, claimed by the deepest frame it matches when no row above
# did: what the middleware, the framework and the server cost by themselves.
PLUMBING: list[tuple[str, re.Pattern[str]]] = [
    (row, re.compile(pattern))
    for row, pattern in (
        ("middleware: request id, access log, metrics", r"middleware_request\.py|observability"),
        ("middleware: per-key in-flight cap", r"api/inflight\.py"),
        ("middleware: body size, JSON depth, NUL guard", r"api/middleware\.py"),
        ("middleware: OPTIONS", r"api/options\.py"),
        ("thread pool hand-offs", r"anyio/|starlette/concurrency|queue\.py|threading\.py"),
        ("FastAPI/Starlette: routing, dependencies", r"starlette/|fastapi/"),
        ("uvicorn: sockets, HTTP parsing, writing", r"uvicorn/|httptools|h11/"),
        ("event loop", r"asyncio/|uvloop"),
    )
]
OTHER = "other"
Request = Callable[[httpx.AsyncClient], object]


def row_of(stack: list[str]) -> str:
    """The row a sample's stack (root first) belongs to."""
    for row, pattern in WORK:
        if any(pattern.search(frame) for frame in stack):
            return row
    for frame in reversed(stack):
        for row, pattern in PLUMBING:
            if pattern.search(frame):
                return row
    return OTHER


def summarise(folded: str) -> tuple[int, Counter[str]]:
    """(samples, samples per row) of py-spy's folded output ("frame;frame;... count")."""
    rows: Counter[str] = Counter()
    total = 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        rows[row_of(frames)] += int(count)
        total += int(count)
    return total, rows


@dataclass
class Profile:
    requests: int
    p50_s: float
    samples: int
    rows: Counter[str]
    cpu_ms_per_request: float


def profiled(url: str, pid: int, args: argparse.Namespace, request: Request) -> Profile:
    """py-spy on `pid` while `args.clients` clients send `request` for `args.seconds`."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        spy = subprocess.Popen(
            [
                *("py-spy", "record", "--pid", str(pid), "--gil", "--nonblocking"),
                *("--rate", str(args.rate), "--duration", str(round(args.seconds))),
                *("--format", "raw", "--output", out.name),
            ],
            executable=str(Path(sys.executable).with_name("py-spy")),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        cpu = cpu_seconds(pid)
        _, p50, _, requests = asyncio.run(load(url, args.clients, args.seconds, request, args.auth))
        cpu = cpu_seconds(pid) - cpu
        _, spy_errors = spy.communicate(timeout=60)
        folded = Path(out.name).read_text()
    if spy.returncode != 0 or not folded:
        sys.exit(f"py-spy failed ({spy.returncode}): {spy_errors[-2000:]}")
    if args.flame:
        args.flame.with_suffix(f".{pid}.folded").write_text(folded)
    samples, rows = summarise(folded)
    return Profile(requests, p50, samples, rows, cpu * 1000 / max(requests, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verb", choices=("POST", "GET"), default="POST")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=200, help="samples per second")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument(
        "--flame", type=Path, help="keep the folded stacks beside this path (one per server)"
    )
    args = parser.parse_args()
    spec = job_spec(stop={"max_steps": 10})
    profiles: dict[str, Profile] = {}
    with (
        api_environment() as (env, key),
        server(OURS, env) as ours,
        server([*UVICORN, "bench.bare_app:app"], env) as lean,
    ):
        args.auth = {"Authorization": f"Bearer {key}"}
        for name, app, path in (("ours", ours, "/v1/jobs"), ("lean", lean, "/lean/jobs")):
            job_id = httpx.post(app.url + path, json=spec, headers=args.auth).json()["id"]
            if args.verb == "POST":
                request: Request = lambda c, path=path: c.post(path, json=spec)  # noqa: E731
            else:
                request = lambda c, path=path, job_id=job_id: c.get(f"{path}/{job_id}")  # noqa: E731
            asyncio.run(load(app.url, args.clients, 2.0, request, args.auth))  # warm: caches
            profiles[name] = profiled(app.url, app.pid, args, request)
    expected = args.seconds * args.rate
    print(
        f"{args.verb} {'/v1/jobs/{id}' if args.verb == 'GET' else '/v1/jobs'}, "
        f"{args.clients} clients, {args.seconds:g} s each, py-spy --gil at {args.rate} Hz"
    )
    for name, profile in profiles.items():
        print(
            f"  {name}: {profile.requests / args.seconds:.0f} req/s, p50 "
            f"{profile.p50_s * 1000:.0f} ms, holding the interpreter lock in "
            f"{profile.samples / expected:.0%} of the samples; "
            f"{profile.cpu_ms_per_request:.2f} ms of CPU per request"
        )
    print(f"{'ms of the interpreter lock per request':48} {'ours':>6} {'lean':>6}   ours %")
    ms = {
        name: {row: n * 1000 / args.rate / p.requests for row, n in p.rows.items()}
        for name, p in profiles.items()
    }
    for row, _ in profiles["ours"].rows.most_common():
        share = profiles["ours"].rows[row] / profiles["ours"].samples
        print(f"  {row:46} {ms['ours'][row]:>6.2f} {ms['lean'].get(row, 0.0):>6.2f}   {share:6.1%}")
    for row in set(ms["lean"]) - set(ms["ours"]):
        print(f"  {row:46} {0.0:>6.2f} {ms['lean'][row]:>6.2f}")
    totals = {name: sum(m.values()) for name, m in ms.items()}
    print(f"  {'all':46} {totals['ours']:>6.2f} {totals['lean']:>6.2f}")


if __name__ == "__main__":
    main()
