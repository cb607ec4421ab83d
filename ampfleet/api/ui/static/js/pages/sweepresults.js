// What a sweep found, drawn from the sweep as GET /v1/sweeps/{id} answers it: the trials
// table, the objective by trial number, quality against throughput, the parameters in
// parallel coordinates, the precision report, and the best trial (or the Pareto front) with
// its model's download. The API decides which trial is best and which are on the Pareto
// front of the sweep's objectives (api/sweeps/results.py); the page only draws.
import { api } from "../api.js";
import { extent, lineChart } from "../charts.js";
import { fill, h, num, stateBadge, syncRows } from "../dom.js";
import { parallelCoordinates, tradeoffChart } from "../sweepcharts.js";
import { downloadArtifact } from "./jobartifacts.js";

const MODEL = "model.safetensors";
const THROUGHPUT = "samples_per_s";

export function paramText(value) {
  return typeof value === "number" ? num(value) : String(value);
}

const isBetter = (direction) => (a, b) => (direction === "maximize" ? a > b : a < b);
const goalText = (objective) => (objective.direction === "maximize" ? "higher is better" : "lower is better");
const jobLink = (trial) => (trial.job_id
  ? h("a", { href: `#/jobs/${trial.job_id}`, class: "job-link" }, trial.job_id)
  : h("span", { class: "muted" }, "never admitted"));

// -- the trials ------------------------------------------------------------------------------

function trialCells(sweep, trial) {
  const space = Object.keys(sweep.spec.space);
  const values = trial.values || [];
  return [
    h("td", { class: "number" }, String(trial.number), sweep.best_trial?.number === trial.number ? h("span", { class: "best-mark", title: "the best trial" }, " ★") : null),
    space.map((name) => h("td", { class: "param", dataset: { param: name } }, paramText(trial.params[name]))),
    sweep.spec.objectives.map((o, i) => h("td", { class: "value", dataset: { objective: o.metric, value: values[i] ?? "" } },
      values[i] === undefined ? "—" : num(values[i]))),
    h("td", { class: "speed" }, num(trial.measures.samples_per_s)),
    h("td", { class: "slot-seconds" }, num(trial.measures.slot_s)),
    h("td", { class: "state" }, stateBadge(trial.state)),
    h("td", { class: "reason" }, trial.reason || ""),
    h("td", { class: "job" }, jobLink(trial)),
  ];
}

/** The trials table: one row per trial, kept in place across reads. */
export function trialsTable() {
  const head = h("thead");
  const body = h("tbody");
  const rows = new Map();
  const el = h("table", { class: "table compact", id: "trials" }, head, body);
  const draw = (sweep) => {
    if (!head.childElementCount) {
      fill(head, h("tr", {}, ["#", ...Object.keys(sweep.spec.space), ...sweep.spec.objectives.map((o) => o.metric),
        "samples/s", "slot-s", "State", "Reason", "Job"].map((t) => h("th", {}, t))));
    }
    const front = new Set(sweep.pareto_front.map((t) => t.number));
    const mark = (tr, trial) => {
      tr.dataset.state = trial.state;
      tr.dataset.best = String(sweep.best_trial?.number === trial.number);
      tr.dataset.front = String(front.has(trial.number));
    };
    syncRows(body, rows, sweep.trials, {
      key: (trial) => trial.number,
      create: (trial) => {
        const tr = h("tr", { dataset: { trial: trial.number } }, trialCells(sweep, trial));
        mark(tr, trial);
        return tr;
      },
      update: (tr, trial) => {
        fill(tr, trialCells(sweep, trial));
        mark(tr, trial);
      },
    });
    if (!sweep.trials.length) body.append(h("tr", {}, h("td", { class: "muted empty", colspan: 99 }, "No trial yet.")));
  };
  return { el, draw };
}

// -- the charts ------------------------------------------------------------------------------

/** Objective `index` of each complete trial by its number, and the best so far. */
export function drawObjective(container, sweep, index) {
  const objective = sweep.spec.objectives[index];
  const better = isBetter(objective.direction);
  const done = sweep.trials.filter((t) => t.values).sort((a, b) => a.number - b.number);
  const points = done.map((t) => [t.number, t.values[index]]);
  let best = null;
  const bestSoFar = points.map(([n, v]) => {
    if (best === null || better(v, best)) best = v;
    return [n, best];
  });
  lineChart(container, [
    { name: "objective", label: `${objective.metric} (${goalText(objective)})`, points, dots: true },
    { name: "best", label: "best so far", points: bestSoFar, color: "#16a34a" },
  ], { xLabel: "trial", xWhole: true, emptyText: "no complete trial yet" });
}

/** The trials no other is both faster than and at least as good as (and better on one). */
function tradeoffFront(points, direction) {
  const better = isBetter(direction);
  const noWorse = (a, b) => a === b || better(a, b);
  return new Set(points.filter((p) => !points.some((q) =>
    q.x >= p.x && noWorse(q.y, p.y) && (q.x > p.x || better(q.y, p.y)))).map((p) => p.trial));
}

/**
 * Quality (the first objective that is not throughput) against the measured samples/s of
 * each complete trial. The front is that of these two axes: for a sweep whose objectives
 * are exactly these two it is the API's Pareto front; for one objective it is the trade-off
 * the sweep's precision choices make.
 */
export function drawTradeoff(container, sweep) {
  const objectives = sweep.spec.objectives;
  const index = Math.max(objectives.findIndex((o) => o.metric !== THROUGHPUT), 0);
  const quality = objectives[index];
  const points = sweep.trials
    .filter((t) => t.values && Number.isFinite(t.measures.samples_per_s))
    .map((t) => ({
      trial: t.number, x: t.measures.samples_per_s, y: t.values[index],
      label: `trial ${t.number}: ${Object.entries(t.params).map(([k, v]) => `${k}=${paramText(v)}`).join(", ")}`,
    }));
  const front = tradeoffFront(points, quality.direction);
  tradeoffChart(container, points.map((p) => ({ ...p, front: front.has(p.trial) })), {
    xLabel: "samples/s (mean)", yLabel: `${quality.metric} (${goalText(quality)})`, emptyText: "no complete trial yet",
  });
}

function spaceAxis(name, dimension) {
  if (dimension.type === "categorical") return { name, kind: "categorical", choices: dimension.choices };
  const log = dimension.type === "log_uniform" || dimension.log;
  return { name, kind: log ? "log" : "linear", lo: dimension.low, hi: dimension.high };
}

/** Every trial's parameters, and the first objective as the last axis and the colour. */
export function drawParallel(container, sweep) {
  const objective = sweep.spec.objectives[0];
  const scored = sweep.trials.filter((t) => t.values).map((t) => t.values[0]);
  const [lo, hi] = scored.length ? extent(scored) : [0, 1];
  const axes = [
    ...Object.entries(sweep.spec.space).map(([name, dimension]) => spaceAxis(name, dimension)),
    { name: objective.metric, kind: "linear", lo, hi },
  ];
  const lines = sweep.trials.map((t) => {
    const value = t.values ? t.values[0] : null;
    let shade = null;
    if (value !== null) {
      const rising = hi > lo ? (value - lo) / (hi - lo) : 1;
      shade = objective.direction === "maximize" ? rising : 1 - rising;
    }
    return { trial: t.number, values: { ...t.params, [objective.metric]: value }, value, t: shade };
  });
  parallelCoordinates(container, axes, lines, { colorLabel: objective.metric, emptyText: "no trial yet" });
}

// -- the precision report and the best trial -------------------------------------------------

export function drawPrecisionReport(box, sweep) {
  const objective = sweep.spec.objectives[0];
  const report = sweep.precision_report;
  if (!report.length) {
    fill(box, h("p", { class: "muted" }, "No trial has reported yet: the report compares each precision tried."));
    return;
  }
  const jobOf = new Map(sweep.trials.map((t) => [t.number, t.job_id]));
  const outcome = (row) => (row.reason ? `${row.state}: ${row.reason}` : row.state);
  fill(box, h("table", { class: "table compact", id: "precision-report" },
    h("thead", {}, h("tr", {}, ["Precision", "Trials (complete)", "Trial shown", "Outcome", objective.metric, "samples/s", "slot-s"].map((t) => h("th", {}, t)))),
    h("tbody", {}, report.map((row) => h("tr", { dataset: { precision: row.precision, trial: String(row.trial) } },
      h("td", { class: "precision" }, row.precision),
      h("td", { class: "trials" }, `${row.trials} (${row.complete})`),
      h("td", { class: "trial" },
        h("a", { href: `#/jobs/${jobOf.get(row.trial)}` }, `trial ${row.trial}`),
        row.same_configuration ? h("span", { class: "muted", title: "the best trial's parameters in this precision" }, " same configuration") : null),
      h("td", { class: "outcome" }, outcome(row)),
      h("td", { class: "value" }, num(row.value)),
      h("td", { class: "speed" }, num(row.samples_per_s)),
      h("td", { class: "slot-seconds" }, num(row.slot_s)))))),
    h("p", { class: "muted small" }, `Per precision tried: the trial with the best trial's configuration where one ran in it, else its best or furthest trial; pruned and failed precisions say why.`));
}

async function downloadModel(ctx, trial, { button, status, row }) {
  button.disabled = true;
  status.textContent = "looking for the model…";
  try {
    const { items } = await api(`/v1/jobs/${encodeURIComponent(trial.job_id)}/artifacts`, { signal: ctx.signal });
    const model = items.find((a) => a.name === MODEL);
    if (!model) {
      status.textContent = "no model: its job exported none";
      button.disabled = false;
      return;
    }
    await downloadArtifact(ctx, trial.job_id, model, { button, status, row });
  } catch (error) {
    status.textContent = "failed";
    button.disabled = false;
    ctx.showError(error, `listing the artifacts of trial ${trial.number}`);
  }
}

function winner(ctx, sweep, trial) {
  const status = h("span", { class: "download-status muted small", role: "status" });
  const button = h("button", { type: "button", class: "download-model secondary", disabled: !trial.job_id }, `Download ${MODEL}`);
  const entry = h("div", { class: "winner", dataset: { trial: trial.number, job: trial.job_id || "" } },
    h("h3", {}, `Trial ${trial.number}`, " ", trial.job_id ? h("a", { href: `#/jobs/${trial.job_id}`, class: "job-link" }, "its job") : null),
    h("dl", { class: "stats" },
      Object.entries(trial.params).flatMap(([k, v]) => [h("dt", {}, k), h("dd", { dataset: { param: k } }, paramText(v))]),
      sweep.spec.objectives.flatMap((o, i) => [h("dt", {}, o.metric),
        h("dd", { class: "value", dataset: { objective: o.metric, value: String(trial.values?.[i]) } }, num(trial.values?.[i]))]),
      [h("dt", {}, "samples/s"), h("dd", {}, num(trial.measures.samples_per_s))]),
    h("div", {}, button, " ", status));
  button.addEventListener("click", () => downloadModel(ctx, trial, { button, status, row: entry }));
  return entry;
}

/** The best trial (one objective) or the Pareto front (several), each with its model. */
export function bestPanel(ctx) {
  const title = h("h2", {}, "Best trial");
  const box = h("div", { id: "best-trial" });
  const el = h("section", { class: "panel", id: "best-panel" }, title, box);
  let shown = null;
  const draw = (sweep) => {
    const several = sweep.spec.objectives.length > 1;
    const trials = several ? sweep.pareto_front : (sweep.best_trial ? [sweep.best_trial] : []);
    const now = JSON.stringify(trials.map((t) => [t.number, t.values]));
    if (now === shown) return; // an unchanged winner keeps its download in progress
    shown = now;
    title.textContent = several ? "Pareto front" : "Best trial";
    fill(box, trials.length
      ? trials.map((trial) => winner(ctx, sweep, trial))
      : h("p", { class: "muted" }, "No complete trial yet."));
    if (several) box.prepend(h("p", { class: "muted small" }, "The trials no other beats on every objective; each one's model downloads as any job's."));
  };
  return { el, draw };
}
