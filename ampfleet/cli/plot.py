"""Metric curves for `ampfleet metrics --plot`: a PNG (matplotlib, the `plot` extra) or a
chart drawn with text, which needs nothing installed. Losses get a log axis by default: a
1e-6 loss after a 2.3 start is a flat line at zero on a linear one."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import fmean

from ampfleet.sdk.models import MetricSeries

WIDTH = 64
HEIGHT = 12


def log_axis(series: MetricSeries, requested: bool | None) -> bool:
    """A log value axis when asked for, and by default for a loss (a series whose goal is
    min: its first points would squash the rest against the bottom of a linear axis);
    only when every value is positive."""
    wanted = requested if requested is not None else series.summary.goal == "min"
    return wanted and series.summary.min > 0


def _axis_note(series: MetricSeries, requested: bool | None) -> str:
    if log_axis(series, requested):
        return ", log axis"
    return "; linear: not every value is positive" if requested else ""


def text_chart(
    series: MetricSeries, width: int = WIDTH, height: int = HEIGHT, *, log: bool | None = None
) -> str:
    """The series as rows of characters: values on the left axis (log for a loss, unless
    `log` says otherwise), steps along the bottom."""
    logarithmic = log_axis(series, log)
    scale = math.log10 if logarithmic else float
    points = [(p.step, scale(p.value)) for p in series.points]
    if not points:
        return f"{series.name}: no points"
    first, last = points[0][0], points[-1][0]
    low, high = min(v for _, v in points), max(v for _, v in points)
    columns: list[list[float]] = [[] for _ in range(width)]
    for step, value in points:
        column = round((step - first) / (last - first) * (width - 1)) if last > first else 0
        columns[column].append(value)
    grid = [[" "] * width for _ in range(height)]
    for x, values in enumerate(columns):
        if values:
            y = round((fmean(values) - low) / (high - low) * (height - 1)) if high > low else 0
            grid[height - 1 - y][x] = "*"

    def shown(value: float) -> float:
        return 10**value if logarithmic else value

    labels = {
        0: f"{shown(high):.4g}",
        height // 2: f"{shown((low + high) / 2):.4g}",
        height - 1: f"{shown(low):.4g}",
    }
    rows = [f"{labels.get(i, ''):>10} |{''.join(row)}" for i, row in enumerate(grid)]
    axis = f"{'':>10} +{'-' * width}"
    steps = f"{'':>12}{first:<{width // 2}}{last:>{width - width // 2}}"
    return "\n".join([f"{series.name} (by step{_axis_note(series, log)})", *rows, axis, steps])


def png_chart(
    series: list[MetricSeries], path: Path, title: str, *, log: bool | None = None
) -> None:
    """One panel per series, sharing the step axis; a downsampled series shows its band;
    the value axis as `log_axis` decides for each."""
    from matplotlib.figure import Figure  # the `plot` extra; ImportError tells the caller

    figure = Figure(figsize=(8, 2.6 * len(series) + 0.8), layout="constrained")
    axes = figure.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
    for ax, one in zip(axes, series, strict=True):
        ax.plot(one.steps, one.values, linewidth=1.4)
        if one.downsampled:
            low = [p.min if p.min is not None else p.value for p in one.points]
            high = [p.max if p.max is not None else p.value for p in one.points]
            ax.fill_between(one.steps, low, high, alpha=0.25, linewidth=0)
        ax.set_ylabel(one.name)
        if log_axis(one, log):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    figure.suptitle(title)
    figure.savefig(path, format="png", dpi=100)
