// Hand-written SVG charts: lines (metric curves) and stacked bars (step-time breakdown), and
// the pieces other charts are built of (sweepcharts.js).
import { num } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
export const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777"];
const MAX_POINTS = 800; // per drawn line; more than a chart's width in pixels

export function s(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
}

export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) * 0.1 || 1;
    return niceTicks(lo - pad, hi + pad, count);
  }
  const raw = (hi - lo) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((candidate) => raw <= candidate);
  const first = Math.floor(lo / step) * step;
  const ticks = [];
  for (let t = first; t <= hi + step * 0.5; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/** At most `max` points: the first, the last, and an even stride between them. */
function thin(points, max = MAX_POINTS) {
  if (points.length <= max) return points;
  const stride = (points.length - 1) / (max - 1);
  return Array.from({ length: max }, (_, i) => points[Math.round(i * stride)]);
}

export function frame(container, width, height, { xLabel, emptyText }, hasData) {
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img" });
  container.replaceChildren(svg);
  if (!hasData) {
    svg.append(s("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "chart-empty" }, emptyText || "no data yet"));
  } else if (xLabel) {
    svg.append(s("text", { x: width - 8, y: height - 4, "text-anchor": "end", class: "axis-label" }, xLabel));
  }
  return svg;
}

export function axes(svg, box, xs, ys, yFormat) {
  const grid = s("g", { class: "grid" });
  for (const y of ys.ticks) {
    const py = ys.scale(y);
    grid.append(s("line", { x1: box.left, x2: box.right, y1: py, y2: py }));
    grid.append(s("text", { x: box.left - 6, y: py + 4, "text-anchor": "end", class: "tick" }, yFormat(y)));
  }
  for (const x of xs.ticks) {
    const px = xs.scale(x);
    grid.append(s("text", { x: px, y: box.bottom + 16, "text-anchor": "middle", class: "tick" }, num(x)));
  }
  grid.append(s("line", { x1: box.left, x2: box.right, y1: box.bottom, y2: box.bottom, class: "axis" }));
  svg.append(grid);
}

export function legend(container, entries) {
  const list = document.createElement("ul");
  list.className = "legend";
  for (const { label, color } of entries) {
    const item = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = color;
    item.append(swatch, label);
    list.append(item);
  }
  container.append(list);
}

/** [min, max] of the finite values (no spread: a long series would overflow the stack). */
export function extent(values) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo <= hi ? [lo, hi] : [0, 1];
}

export function linear(domainLo, domainHi, rangeLo, rangeHi) {
  const span = domainHi - domainLo || 1;
  return (v) => rangeLo + ((v - domainLo) / span) * (rangeHi - rangeLo);
}

/** Ticks at the powers of ten that cover [lo, hi] (both > 0), thinned to about `count`. */
function decadeTicks(lo, hi, count = 5) {
  const first = Math.floor(Math.log10(lo));
  const last = Math.ceil(Math.log10(hi));
  const every = Math.max(1, Math.ceil((last - first) / count));
  const ticks = [];
  for (let e = first; e <= last; e += every) ticks.push(10 ** e);
  if (ticks.length < 2) ticks.push(10 ** (first + every));
  return ticks;
}

/** The y axis: linear, or logarithmic when asked and every value is positive. */
function yAxis(values, box, log) {
  const [lo, hi] = extent(values);
  if (log && lo > 0) {
    const ticks = decadeTicks(lo, hi);
    const scale = linear(Math.log10(ticks[0]), Math.log10(ticks[ticks.length - 1]), box.bottom, box.top);
    return { ticks, scale: (v) => scale(Math.log10(v)), log: true };
  }
  const ticks = niceTicks(lo, hi, 4);
  return { ticks, scale: linear(ticks[0], ticks[ticks.length - 1], box.bottom, box.top), log: false };
}

/**
 * series: [{name, points: [[step, value], ...]}]; draws one <polyline class="series">
 * per non-empty series, with data-series (its name) and data-points (how many points it has);
 * a series with `dots: true` is drawn as a <g class="series-dots"> of circles instead (one
 * per point, with data-x and data-y), for values that are no curve.
 * `log`: a logarithmic y axis, where every value is positive (the svg's data-scale says
 * which one was drawn: "log" or "linear"). `xWhole`: ticks only at whole x (trial numbers).
 */
export function lineChart(container, series, { width = 560, height = 220, xLabel = "step", yFormat = num, emptyText, log = false, xWhole = false } = {}) {
  const drawn = series.filter((one) => one.points.length);
  const svg = frame(container, width, height, { xLabel, emptyText }, drawn.length > 0);
  if (!drawn.length) return;
  const [xLo, xHi] = extent(drawn.flatMap((one) => one.points.map((p) => p[0])));
  const box = { left: 56, right: width - 12, top: 10, bottom: height - 28 };
  const xTicks = niceTicks(xLo, xHi, 6).filter((t) => t >= xLo && t <= xHi && (!xWhole || Number.isInteger(t)));
  const xs = { ticks: xTicks, scale: linear(xLo, xHi, box.left, box.right) };
  const ys = yAxis(drawn.flatMap((one) => one.points.map((p) => p[1])), box, log);
  svg.dataset.scale = ys.log ? "log" : "linear";
  axes(svg, box, xs, ys, yFormat);
  drawn.forEach((one, index) => {
    const color = one.color || PALETTE[index % PALETTE.length];
    const shown = thin(one.points.filter((p) => Number.isFinite(p[1]) && (!ys.log || p[1] > 0)));
    if (one.dots) {
      const dots = s("g", { class: "series-dots", "data-series": one.name, "data-points": one.points.length });
      for (const [x, y] of shown) {
        dots.append(s("circle", { cx: xs.scale(x).toFixed(1), cy: ys.scale(y).toFixed(1), r: 4, fill: color, "data-x": x, "data-y": y }));
      }
      svg.append(dots);
      return;
    }
    const coords = shown
      .map(([x, y]) => `${xs.scale(x).toFixed(1)},${ys.scale(y).toFixed(1)}`)
      .join(" ");
    svg.append(s("polyline", {
      class: "series", points: coords, fill: "none", stroke: color, "stroke-width": 2,
      "data-series": one.name, "data-points": one.points.length,
    }));
    if (one.points.length === 1) {
      const [x, y] = one.points[0];
      svg.append(s("circle", { cx: xs.scale(x), cy: ys.scale(y), r: 3, fill: color }));
    }
  });
  legend(container, drawn.map((one, index) => ({ label: one.label || one.name, color: one.color || PALETTE[index % PALETTE.length] })));
}

/**
 * rows: [{x, values: {key: number}}], keys: [{key, label, color}]; one <rect class="bar-seg">
 * per row and key, stacked in the order of `keys`, with data-key and data-x.
 */
export function stackedBars(container, rows, keys, { width = 560, height = 220, xLabel = "step", yFormat = num, emptyText } = {}) {
  const svg = frame(container, width, height, { xLabel, emptyText }, rows.length > 0);
  if (!rows.length) return;
  const totals = rows.map((row) => keys.reduce((sum, k) => sum + Math.max(row.values[k.key] || 0, 0), 0));
  const box = { left: 56, right: width - 12, top: 10, bottom: height - 28 };
  const yTicks = niceTicks(0, extent(totals)[1], 4);
  const ys = { ticks: yTicks, scale: linear(0, yTicks[yTicks.length - 1], box.bottom, box.top) };
  const slot = (box.right - box.left) / rows.length;
  const every = Math.ceil(rows.length / 8);
  const xs = { ticks: [], scale: () => 0 };
  axes(svg, box, xs, ys, yFormat);
  const bars = s("g", { class: "bars" });
  rows.forEach((row, i) => {
    const x = box.left + i * slot + slot * 0.1;
    let base = 0;
    for (const k of keys) {
      const value = Math.max(row.values[k.key] || 0, 0);
      const top = ys.scale(base + value);
      const rect = s("rect", {
        class: "bar-seg", x: x.toFixed(1), y: top.toFixed(1), width: Math.max(slot * 0.8, 1).toFixed(1),
        height: Math.max(ys.scale(base) - top, 0).toFixed(1), fill: k.color, "data-key": k.key, "data-x": row.x,
      });
      rect.append(s("title", {}, `step ${row.x} ${k.label}: ${yFormat(value)}`));
      bars.append(rect);
      base += value;
    }
    if (i % every === 0) {
      bars.append(s("text", { x: (x + slot * 0.4).toFixed(1), y: box.bottom + 16, "text-anchor": "middle", class: "tick" }, num(row.x)));
    }
  });
  svg.append(bars);
  legend(container, keys.map((k) => ({ label: k.label, color: k.color })));
}
