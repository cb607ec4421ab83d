// A job's metric series as they stream in, and the panels drawn from them: loss and
// validation curves (the loss on a log axis unless unticked), the step-time breakdown, AMP
// health and AllReduce bytes saved. Each chart says which steps it shows: the curves the
// whole run, the breakdown its latest logged steps.
import { lineChart, stackedBars } from "../charts.js";
import { bytes, fill, h, num } from "../dom.js";

const STEP_PHASES = [
  { key: "time_data_s", label: "data", color: "#94a3b8" },
  { key: "time_forward_s", label: "forward", color: "#2563eb" },
  { key: "time_backward_s", label: "backward", color: "#7c3aed" },
  { key: "time_allreduce_exposed_s", label: "AllReduce (exposed)", color: "#dc2626" },
  { key: "time_optimizer_s", label: "optimizer", color: "#16a34a" },
];
const STEP_BARS = 60; // the latest logged steps drawn in the breakdown
const HALF = new Set(["bf16", "fp16"]);

/** Metric points by name and step; a step logged again (after a restart) replaces the old value.
 * Each series is sorted once after it changes, not on every read: a draw reads several. */
export class MetricStore {
  constructor() {
    this.byName = new Map(); // name -> Map(step -> value)
    this.sorted = new Map(); // name -> [[step, value], ...], dropped when the series changes
  }

  add(points) {
    for (const { name, step, value } of points) {
      let series = this.byName.get(name);
      if (!series) this.byName.set(name, (series = new Map()));
      series.set(step, value);
      this.sorted.delete(name);
    }
  }

  names() {
    return [...this.byName.keys()];
  }

  points(name) {
    let points = this.sorted.get(name);
    if (!points) {
      const series = this.byName.get(name);
      points = series ? [...series].sort((a, b) => a[0] - b[0]) : [];
      this.sorted.set(name, points);
    }
    return points;
  }

  last(name) {
    const points = this.points(name);
    return points.length ? points[points.length - 1] : null;
  }
}

export function metricPanels() {
  const el = {
    loss: h("div", { id: "chart-loss", class: "chart-box" }),
    lossLog: h("input", { type: "checkbox", id: "loss-log", checked: true }),
    lossWindow: h("p", { id: "chart-loss-window", class: "muted small chart-window" }),
    stepTimeWindow: h("p", { id: "chart-step-time-window", class: "muted small chart-window" }),
    validation: h("div", { id: "chart-validation", class: "chart-box" }),
    stepTime: h("div", { id: "chart-step-time", class: "chart-box" }),
    ampStats: h("dl", { id: "amp-stats", class: "stats" }),
    gradNorm: h("div", { id: "chart-grad-norm", class: "chart-box" }),
    lossScale: h("div", { id: "chart-loss-scale", class: "chart-box" }),
    allreduce: h("div", { id: "allreduce" }),
    utilisation: h("div", { id: "chart-utilisation", class: "chart-box" }),
    memory: h("div", { id: "chart-memory", class: "chart-box" }),
    mfu: h("div", { id: "chart-mfu", class: "chart-box" }),
  };
  const panels = [
    h("section", { class: "panel" },
      h("div", { class: "panel-head" }, h("h2", {}, "Loss"), h("label", { class: "small" }, el.lossLog, " log scale")),
      el.loss, el.lossWindow),
    h("section", { class: "panel" }, h("h2", {}, "Validation"), el.validation),
    h("section", { class: "panel" }, h("h2", {}, "Step time breakdown (s per logged step)"), el.stepTime, el.stepTimeWindow),
    h("section", { class: "panel", id: "amp-health" }, h("h2", {}, "AMP health"), el.ampStats, el.gradNorm, el.lossScale),
    h("section", { class: "panel" }, h("h2", {}, "AllReduce bytes vs fp32"), el.allreduce),
    h("section", { class: "panel", id: "devices" }, h("h2", {}, "Devices: utilisation, memory, MFU per rank"),
      el.utilisation, el.memory, el.mfu),
  ];
  return { el, panels };
}

function stat(label, value, id) {
  return [h("dt", {}, label), h("dd", id ? { id } : {}, value)];
}

function drawAllreduce(box, store, job) {
  const last = store.last("allreduce_bytes");
  const setting = job.allreduce_dtype;
  const wire = setting.effective || (setting.requested !== "auto" ? setting.requested : null);
  if (!last) {
    fill(box, h("p", { class: "muted" }, "No AllReduce measured yet."));
    return;
  }
  const sent = last[1];
  if (!wire) {
    fill(box, h("dl", { class: "stats" }, stat("bytes/step", bytes(sent)), stat("wire dtype", "not known yet")));
    return;
  }
  const fp32 = HALF.has(wire) ? sent * 2 : sent;
  const saved = fp32 - sent;
  const percent = fp32 > 0 ? (saved / fp32) * 100 : 0;
  const sentBar = h("span", { class: "bar-fill sent" });
  sentBar.style.width = `${fp32 > 0 ? (sent / fp32) * 100 : 0}%`;
  const steps = job.progress.step;
  fill(
    box,
    h("dl", { class: "stats" },
      stat("wire dtype", wire, "allreduce-dtype"),
      stat("bytes/step", bytes(sent), "allreduce-bytes"),
      stat("fp32 would be", bytes(fp32)),
      stat("saved/step", `${bytes(saved)} (${percent.toFixed(0)}%)`, "allreduce-saved")),
    h("div", { class: "compare", title: "bytes sent per step against fp32" },
      h("span", { class: "bar" }, sentBar),
      h("span", { class: "muted small" }, `${bytes(sent)} of ${bytes(fp32)}`)),
    steps ? h("p", { class: "muted small" }, `≈ ${bytes(saved * steps)} saved over ${steps} steps`) : null,
  );
  box.dataset.savedPercent = percent.toFixed(1);
}

/** The node agent's per-rank series of one kind (`<kind>_rank<R>`), rank order. */
function rankSeries(store, kind) {
  const pattern = new RegExp(`^${kind}_rank(\\d+)$`);
  return store.names().map((name) => [name, pattern.exec(name)]).filter(([, m]) => m)
    .sort((a, b) => Number(a[1][1]) - Number(b[1][1]))
    .map(([name, m]) => ({ name, label: `rank ${m[1]}`, points: store.points(name) }));
}

// GPU figures where NVML reported them, else the ranks' CPU and resident memory.
function drawDevices(el, store) {
  const gpu = rankSeries(store, "gpu_util_percent");
  lineChart(el.utilisation, gpu.length ? gpu : rankSeries(store, "cpu_percent"), {
    height: 160, emptyText: "no telemetry yet (the node agent samples every AMPFLEET_TELEMETRY_INTERVAL_S)",
  });
  el.utilisation.dataset.kind = gpu.length ? "gpu_util_percent" : "cpu_percent";
  const gpuMemory = rankSeries(store, "gpu_memory_mb");
  lineChart(el.memory, gpuMemory.length ? gpuMemory : rankSeries(store, "rss_mb"), { height: 160 });
  el.memory.dataset.kind = gpuMemory.length ? "gpu_memory_mb" : "rss_mb";
  lineChart(el.mfu, [{ name: "mfu", label: "MFU", points: store.points("mfu") }], {
    height: 120, emptyText: "no MFU yet (reported steps)",
  });
}

/** "steps 10–1,800" of a chart's rows, or "" when it has none. */
function stepSpan(points) {
  return points.length ? `steps ${num(points[0][0])}–${num(points[points.length - 1][0])}` : "";
}

/**
 * The metric that says how the job did, from the series' goals (the metrics summary's:
 * null for what is no objective): a validation metric to maximise, else one to minimise,
 * else the training loss. {name, value, goal}, or null when none has a value yet.
 */
export function headline(goals, latest) {
  const rank = (name) => (name.startsWith("val_") ? 0 : 2) + (goals.get(name) === "max" ? 0 : 1);
  const [name] = [...goals.keys()].filter((n) => goals.get(n) && latest[n] !== undefined)
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  return name ? { name, value: latest[name], goal: goals.get(name) } : null;
}

export function drawMetrics(el, store, job) {
  const losses = store.points("loss");
  lineChart(el.loss, [
    { name: "loss", label: "train loss", points: losses },
    { name: "val_loss", label: "validation loss", points: store.points("val_loss") },
  ], { log: el.lossLog.checked });
  el.lossWindow.textContent = losses.length ? `${stepSpan(losses)}: the whole run` : "";
  const validation = store.names().filter((n) => n.startsWith("val_") && n !== "val_loss").sort();
  lineChart(el.validation, validation.map((name) => ({ name, points: store.points(name) })), {
    emptyText: "no validation metrics yet (eval_every_steps)",
  });

  const times = new Map();
  for (const phase of STEP_PHASES) {
    for (const [step, value] of store.points(phase.key)) {
      if (!times.has(step)) times.set(step, {});
      times.get(step)[phase.key] = value;
    }
  }
  const logged = [...times].sort((a, b) => a[0] - b[0]);
  const rows = logged.slice(-STEP_BARS).map(([x, values]) => ({ x, values }));
  stackedBars(el.stepTime, rows, STEP_PHASES, { yFormat: num });
  el.stepTimeWindow.textContent = !rows.length ? ""
    : rows.length < logged.length
      ? `${stepSpan(rows.map((r) => [r.x]))}: the latest ${rows.length} of ${logged.length} logged steps`
      : `${stepSpan(rows.map((r) => [r.x]))}: every logged step`;

  const scale = store.last("loss_scale");
  const skipped = store.last("skipped_steps");
  const gradNorm = store.last("grad_norm");
  fill(el.ampStats,
    stat("loss scale", scale ? num(scale[1]) : "none (only fp16 scales the loss)", "amp-loss-scale"),
    stat("skipped steps", skipped ? String(skipped[1]) : "—", "amp-skipped"),
    stat("grad norm", gradNorm ? num(gradNorm[1]) : "—", "amp-grad-norm"));
  lineChart(el.gradNorm, [{ name: "grad_norm", label: "grad norm", points: store.points("grad_norm") }], { height: 160 });
  el.lossScale.hidden = !scale;
  if (scale) lineChart(el.lossScale, [{ name: "loss_scale", label: "loss scale", points: store.points("loss_scale") }], { height: 160 });
  drawAllreduce(el.allreduce, store, job);
  drawDevices(el, store);
}
