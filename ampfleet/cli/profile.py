"""`ampfleet profile JOB --steps 5 -o DIR`: capture a running job's next steps with
torch.profiler, wait until the traces are stored, download them with summary.json (a bar per
file, resumable) and print the summary. Interrupted while it waits, it cancels the profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ampfleet.cli.artifacts import progress_bars
from ampfleet.cli.common import JobId, Key, Url, api_client, fail, stdout_console
from ampfleet.core.profile_states import MAX_STEPS, ProfileState
from ampfleet.sdk import Profile

PANEL = "Use the API"
TOP_SHOWN = 8
PERFETTO = "https://ui.perfetto.dev"


def _ranks(value: str | None) -> list[int] | None:
    if value is None:
        return None
    refusal = typer.BadParameter("rank numbers separated by commas, e.g. 0,1", param_hint="--ranks")
    try:
        ranks = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise refusal from None
    if not ranks:
        raise refusal
    return ranks


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """What a profile's summary says, in a few lines."""
    overall = summary.get("overall", {})
    step = overall.get("step_time_s")
    lines = [
        f"steps {summary['start_step']}-{summary['end_step']} on {summary.get('device')}, "
        f"{summary.get('precision')} compute, {summary.get('allreduce_dtype')} AllReduce: "
        + (f"{step:.4f} s per step" if step is not None else "no step time")
        + f"; backward {_share(overall.get('backward_share'))} of the step; communication "
        f"hidden behind compute {_share(overall.get('communication_hidden_share'))}"
    ]
    ranks: dict[str, Any] = summary.get("ranks", {})
    for rank, figures in sorted(ranks.items(), key=lambda item: int(item[0])):
        shares = figures["phases"]["shares"]
        phases = ", ".join(f"{name} {share:.0%}" for name, share in shares.items() if share)
        lines.append(f"rank {rank}: {phases}")
        overlap = figures.get("overlap")
        if overlap:
            lines.append(
                f"  compute {overlap['compute_s'] * 1e3:.1f} ms, communication "
                f"{overlap['communication_s'] * 1e3:.1f} ms per step, "
                f"{_share(overlap['hidden_share'])} of it hidden ({overlap['basis']})"
            )
    if ranks:
        first = min(ranks, key=int)
        device = summary.get("device") == "cuda"
        lines.append(
            f"top operators by self {'device' if device else 'CPU'} time, rank {first}, "
            f"over the {summary.get('steps')} steps:"
        )
        for op in ranks[first]["top_operators"][:TOP_SHOWN]:
            seconds = op["self_device_s"] if device else op["self_cpu_s"]
            lines.append(f"  {seconds * 1e3:9.2f} ms  {op['calls']:6d} calls  {op['name']}")
    return lines


def profile(
    job_id: JobId,
    steps: Annotated[
        int, typer.Option(min=1, max=MAX_STEPS, help="Optimizer steps to capture.")
    ] = 5,
    ranks: Annotated[
        str | None, typer.Option(help="The ranks that trace, e.g. 0,1 [default: every rank]")
    ] = None,
    record_shapes: Annotated[
        bool, typer.Option(help="Record operators' input shapes (a larger trace).")
    ] = False,
    to: Annotated[Path, typer.Option("--output", "-o", help="Folder to write into.")] = Path("."),
    timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for the traces to be stored.")
    ] = 600,
    url: Url = None,
    key: Key = None,
) -> None:
    """Capture a RUNNING job's next steps with torch.profiler (a Chrome/Perfetto trace per
    rank and a summary: time by phase, top operators, compute/communication overlap), wait,
    download them into DIR/profiles/<id>/ and print the summary."""
    wanted = _ranks(ranks)
    console = stdout_console()
    with api_client(url, key) as client:
        asked = client.profile(job_id, steps=steps, ranks=wanted, record_shapes=record_shapes)
        console.print(
            f"{asked.id}: {steps} steps on "
            + ("every rank" if asked.ranks is None else f"ranks {', '.join(map(str, asked.ranks))}")
            + " requested; the ranks start within 10 steps"
        )
        seen = {asked.state}

        def show(state: Profile) -> None:
            if state.state not in seen:
                seen.add(state.state)
                where = f" at step {state.start_step}" if state.start_step is not None else ""
                console.print(f"{state.state.value}{where}")

        try:
            done = client.wait_profile(job_id, asked.id, timeout=timeout, on_poll=show)
        except KeyboardInterrupt:
            client.cancel_profile(job_id)
            fail(f"interrupted: profile {asked.id} is cancelled")
        if done.state is not ProfileState.DONE:
            fail(f"profile {done.id} {done.state.value}: {done.reason or 'no reason given'}")
        with progress_bars(console) as bars:
            paths = client.download_profile(job_id, done.id, to=to, progress=bars)
    for line in summary_lines(done.summary or {}):
        console.print(escape(line))
    console.print(f"open a trace in {PERFETTO} (Open trace file) or chrome://tracing:")
    for path in paths:
        console.print(f"  saved {escape(str(path))}")


def register(app: typer.Typer) -> None:
    app.command("profile", rich_help_panel=PANEL)(profile)
