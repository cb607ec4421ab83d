// A sweep's own charts, hand-written SVG like charts.js: quality against throughput with the
// trade-off front, and the trials' parameters in parallel coordinates coloured by objective.
import { axes, extent, frame, legend, linear, niceTicks, s } from "./charts.js";
import { num } from "./dom.js";

// Amber to teal to deep purple: a worse objective light, a better one dark, so the ends stay
// apart in grey and for the colour-blind, and the lightest still shows on white.
const SHADES = [[0xf5, 0x9e, 0x0b], [0x0d, 0x94, 0x88], [0x3b, 0x07, 0x64]];
const NO_VALUE = "#cbd5e1";
const FRONT = "#dc2626";
const OTHER = "#94a3b8";

/** The colour of `t` in [0, 1], 0 the worst objective value shown and 1 the best. */
export function shade(t) {
  const at = Math.min(Math.max(Number.isFinite(t) ? t : 0, 0), 1) * (SHADES.length - 1);
  const i = Math.min(Math.floor(at), SHADES.length - 2);
  const f = at - i;
  const mix = SHADES[i].map((c, k) => Math.round(c + (SHADES[i + 1][k] - c) * f));
  return `#${mix.map((c) => c.toString(16).padStart(2, "0")).join("")}`;
}

/** An axis over the values and a little more, so no point sits on its edge. */
function paddedAxis(values, from, to, count) {
  const [lo, hi] = extent(values);
  const pad = (hi - lo) * 0.08 || Math.abs(lo) * 0.1 || 1;
  const ticks = niceTicks(lo - pad, hi + pad, count).filter((t) => t >= lo - pad && t <= hi + pad);
  return { ticks, scale: linear(lo - pad, hi + pad, from, to) };
}

/**
 * points: [{trial, x, y, front, label}]; one <circle class="trial-point"> per point with
 * data-trial, data-front, data-x and data-y, the front's points larger, in red, and joined by
 * <polyline class="front"> in order of x.
 */
export function tradeoffChart(container, points, { width = 560, height = 260, xLabel, yLabel, emptyText } = {}) {
  const svg = frame(container, width, height, { xLabel, emptyText }, points.length > 0);
  if (!points.length) return;
  const box = { left: 56, right: width - 12, top: 22, bottom: height - 28 };
  const xs = paddedAxis(points.map((p) => p.x), box.left, box.right, 5);
  const ys = paddedAxis(points.map((p) => p.y), box.bottom, box.top, 4);
  axes(svg, box, xs, ys, num);
  svg.append(s("text", { x: box.left, y: 12, class: "axis-label" }, yLabel));
  const front = points.filter((p) => p.front).sort((a, b) => a.x - b.x);
  svg.append(s("polyline", {
    class: "front", fill: "none", stroke: FRONT, "stroke-width": 1.5, "stroke-dasharray": "4 3",
    points: front.map((p) => `${xs.scale(p.x).toFixed(1)},${ys.scale(p.y).toFixed(1)}`).join(" "),
  }));
  // The front last, so its points are drawn over the others.
  for (const p of [...points.filter((q) => !q.front), ...front]) {
    const dot = s("circle", {
      class: `trial-point${p.front ? " front" : ""}`, cx: xs.scale(p.x).toFixed(1), cy: ys.scale(p.y).toFixed(1),
      r: p.front ? 6 : 4, fill: p.front ? FRONT : OTHER,
      "data-trial": p.trial, "data-front": p.front, "data-x": p.x, "data-y": p.y,
    });
    dot.append(s("title", {}, p.label));
    svg.append(dot);
  }
  legend(container, [{ label: "the front: no trial is both faster and better", color: FRONT }, { label: "other trials", color: OTHER }]);
}

function axisScale(axis, top, bottom) {
  if (axis.kind === "categorical") {
    const n = axis.choices.length;
    return (v) => {
      const i = axis.choices.indexOf(v);
      if (i < 0) return null;
      return n === 1 ? (top + bottom) / 2 : bottom - (i / (n - 1)) * (bottom - top);
    };
  }
  if (axis.kind === "log") {
    const f = linear(Math.log10(axis.lo), Math.log10(axis.hi), bottom, top);
    return (v) => (Number.isFinite(v) && v > 0 ? f(Math.log10(v)) : null);
  }
  const f = linear(axis.lo, axis.hi, bottom, top);
  return (v) => (Number.isFinite(v) ? f(v) : null);
}

function axisTicks(axis) {
  if (axis.kind === "categorical") return axis.choices;
  return [axis.lo, axis.hi];
}

/**
 * axes: [{name, kind: "categorical" | "linear" | "log", choices, lo, hi}], left to right;
 * lines: [{trial, values: {axis name: value}, value, t}], `t` in [0, 1] the colour (null:
 * no objective value yet, drawn grey and dashed). One <polyline class="trial-line"> per line,
 * with data-trial and data-value; an axis a line has no value on is left out of it.
 */
export function parallelCoordinates(container, axesList, lines, { width = 560, height = 260, colorLabel, emptyText } = {}) {
  const svg = frame(container, width, height, { emptyText }, lines.length > 0 && axesList.length > 0);
  if (!lines.length || !axesList.length) return;
  const box = { left: 48, right: width - 48, top: 24, bottom: height - 24 };
  const step = axesList.length > 1 ? (box.right - box.left) / (axesList.length - 1) : 0;
  const placed = axesList.map((axis, i) => ({
    axis, x: axesList.length > 1 ? box.left + i * step : (box.left + box.right) / 2,
    scale: axisScale(axis, box.top, box.bottom),
  }));
  const grid = s("g", { class: "grid" });
  for (const { axis, x, scale } of placed) {
    grid.append(s("line", { x1: x, x2: x, y1: box.top, y2: box.bottom, class: "axis", "data-axis": axis.name }));
    grid.append(s("text", { x, y: 12, "text-anchor": "middle", class: "axis-label" }, axis.name));
    for (const tick of axisTicks(axis)) {
      const y = scale(tick);
      if (y === null) continue;
      grid.append(s("text", { x: x + 4, y: y + 4, class: "tick" }, typeof tick === "number" ? num(tick) : String(tick)));
    }
  }
  svg.append(grid);
  // Lines without a value first, so the coloured ones are drawn over them.
  const ordered = [...lines].sort((a, b) => (a.t === null ? -1 : a.t) - (b.t === null ? -1 : b.t));
  for (const line of ordered) {
    const coords = placed
      .map(({ axis, x, scale }) => [x, scale(line.values[axis.name])])
      .filter(([, y]) => y !== null)
      .map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`);
    const poly = s("polyline", {
      class: "trial-line", points: coords.join(" "), fill: "none", "stroke-width": 2, "stroke-opacity": 0.85,
      stroke: line.t === null ? NO_VALUE : shade(line.t), "data-trial": line.trial, "data-value": line.value ?? "",
    });
    if (line.t === null) poly.setAttribute("stroke-dasharray", "4 3");
    poly.append(s("title", {}, `trial ${line.trial}${line.value === null ? "" : `: ${num(line.value)}`}`));
    svg.append(poly);
  }
  legend(container, [
    { label: `worse ${colorLabel}`, color: shade(0) },
    { label: "between", color: shade(0.5) },
    { label: `better ${colorLabel}`, color: shade(1) },
    { label: "no value (running, pruned, failed)", color: NO_VALUE },
  ]);
}
