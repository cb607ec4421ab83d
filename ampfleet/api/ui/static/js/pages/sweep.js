// One sweep: its summary, Cancel while it runs, and what it found (sweepresults.js). The
// page draws whole sweeps as GET /v1/sweeps/{id} answers them; `watchSweep` is the one
// place that decides when to read one again: when the sweep's event stream says something
// happened (a trial started, was pruned or ended; the sweep's state or counts changed),
// and every so often while it runs (a running trial's figures change without an event).
import { api, follow } from "../api.js";
import { ageOf, fill, h, num, stateBadge } from "../dom.js";
import { countsText } from "./sweeps.js";
import {
  bestPanel, drawObjective, drawParallel, drawPrecisionReport, drawTradeoff, paramText, trialsTable,
} from "./sweepresults.js";

const AFTER_FRAME_MS = 300; // frames come in bursts (a trial ends, the next starts): one read
const POLL_MS = 10000; // while it runs, without events
const POLL_WITHOUT_STREAM_MS = 3000; // where the stream is refused

/** Ended, with no trial still stopping (a cancelled sweep's trials end after it does). */
const settled = (sweep) => sweep.state !== "RUNNING" && !sweep.trials.some((t) => t.state === "running");

/**
 * Hands the sweep to onSweep now and after every change until it has settled; onError
 * hears a failed read (the next one is tried all the same unless it says no). Returns the
 * stop function.
 */
function watchSweep(ctx, sweepId, onSweep, onError) {
  const path = `/v1/sweeps/${encodeURIComponent(sweepId)}`;
  let timer = null;
  let reading = false;
  let again = false;
  let done = false;
  let pollMs = POLL_MS;
  const readSoon = (ms) => {
    if (done || ctx.signal.aborted) return;
    clearTimeout(timer);
    timer = setTimeout(read, ms);
  };
  async function read() {
    if (reading) {
      again = true;
      return;
    }
    reading = true;
    try {
      const sweep = await api(path, { signal: ctx.signal });
      onSweep(sweep);
      done = settled(sweep);
    } catch (error) {
      if (error.name === "AbortError") return;
      done = !onError(error);
    } finally {
      reading = false;
    }
    if (again) {
      again = false;
      readSoon(0);
    } else {
      readSoon(pollMs);
    }
  }
  read();
  follow(`${path}/events`, {
    signal: ctx.signal,
    onFrame: () => readSoon(AFTER_FRAME_MS),
    onStatus: (status) => {
      if (status === "failed") {
        pollMs = POLL_WITHOUT_STREAM_MS;
        readSoon(pollMs);
      } else if (status === "ended") {
        readSoon(0);
      }
    },
  });
  return () => {
    done = true;
    clearTimeout(timer);
  };
}

function dimensionText(name, d) {
  if (d.type === "categorical") return `${name} ∈ {${d.choices.map(paramText).join(", ")}}`;
  const kind = d.type === "log_uniform" || d.log ? "log " : "";
  return `${name} ${kind}${d.type === "int" ? "int " : ""}${num(d.low)}–${num(d.high)}`;
}

function prunerText(p) {
  if (p.type === "none") return "none";
  const metric = p.metric ? ` on ${p.metric}` : "";
  return p.type === "median"
    ? `median${metric}, after ${p.startup_trials} trials and ${p.warmup_steps} steps`
    : `${p.type}${metric}, from ${p.min_resource} steps, ×${p.reduction_factor}`;
}

function summaryItems(sweep) {
  const spec = sweep.spec;
  const budget = spec.budget;
  const items = [
    ["id", sweep.id],
    ["project", sweep.project],
    ["objectives", spec.objectives.map((o) => `${o.metric} (${o.direction}, ${o.reduce})`).join("; ")],
    ["space", Object.entries(spec.space).map(([name, d]) => dimensionText(name, d)).join("; ")],
    ["sampler", `${spec.sampler.type}, seed ${spec.sampler.seed}`],
    ["pruner", `${prunerText(spec.pruner)}${spec.numerics.enabled ? "; numerics on" : ""}`],
    ["budget", `${budget.max_trials} trials, ${budget.max_concurrent} at a time` +
      (budget.max_slot_hours ? `, ${num(budget.max_slot_hours)} slot-hours` : "")],
    ["trials", countsText(sweep.counts)],
    ["slot-seconds", `${num(sweep.slot_s.total)} (${num(sweep.slot_s.pruned)} in pruned trials)`],
    ["created", `${ageOf(sweep.created_at)} ago`],
    ["finished", sweep.finished_at ? `${ageOf(sweep.finished_at)} ago` : "—"],
  ];
  if (sweep.reason) items.push(["reason", sweep.reason]);
  return items.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { dataset: { field: k } }, v)]);
}

export function sweepPage(ctx, sweepId) {
  const head = h("div", { class: "page-head" }, h("a", { href: "#/sweeps", class: "back" }, "← Sweeps"), h("h1", {}, sweepId));
  const summary = h("dl", { class: "summary", id: "sweep-summary" });
  const notice = h("span", { id: "sweep-notice", class: "muted small", role: "status" });
  const cancel = h("button", { type: "button", id: "cancel-sweep", class: "danger", hidden: true }, "Cancel sweep");
  const confirm = h("span", { id: "cancel-sweep-confirm", class: "confirm", hidden: true }, "Stop the sweep and every trial still running? ",
    h("button", { type: "button", id: "confirm-cancel-sweep", class: "danger" }, "Yes, cancel it"), " ",
    h("button", { type: "button", id: "keep-sweep", class: "secondary" }, "Keep it"));
  const trials = trialsTable();
  const objectiveChart = h("div", { id: "chart-objective", class: "chart-box" });
  const objectiveChoice = h("select", { id: "objective-choice" });
  const tradeoff = h("div", { id: "chart-tradeoff", class: "chart-box" });
  const parallel = h("div", { id: "chart-parallel", class: "chart-box" });
  const report = h("div", { id: "precision-report-box" });
  const best = bestPanel(ctx);
  let sweep = null;
  let drawn = null;
  ctx.view.append(head, h("p", { class: "muted" }, "Loading…"));

  const layout = () => fill(ctx.view,
    head,
    h("section", { class: "panel wide" }, summary, h("div", { class: "actions" }, cancel, confirm, notice)),
    h("section", { class: "panel wide" }, h("h2", {}, "Trials"), trials.el),
    h("div", { class: "grid" },
      h("section", { class: "panel" },
        h("div", { class: "panel-head" }, h("h2", {}, "Objective by trial"), sweep.spec.objectives.length > 1 ? objectiveChoice : null),
        objectiveChart),
      h("section", { class: "panel" }, h("h2", {}, "Quality against throughput"), tradeoff),
      h("section", { class: "panel" }, h("h2", {}, "Parameters"), parallel),
      best.el),
    h("section", { class: "panel wide" }, h("h2", {}, "Precision report"), report));

  const draw = (fresh) => {
    const first = sweep === null;
    sweep = fresh;
    if (first) {
      fill(objectiveChoice, sweep.spec.objectives.map((o, i) => h("option", { value: i }, o.metric)));
      layout();
    }
    fill(head.querySelector("h1"), sweep.name || sweep.id, " ", stateBadge(sweep.state, { id: "sweep-state", "data-state": sweep.state }));
    fill(summary, summaryItems(sweep));
    cancel.hidden = sweep.state !== "RUNNING"; // only a running sweep has anything to cancel
    if (cancel.hidden) confirm.hidden = true;
    // What the charts and tables show changes only with the trials: redrawn only then.
    const now = JSON.stringify([sweep.trials, sweep.precision_report, sweep.best_trial?.number, sweep.pareto_front.map((t) => t.number)]);
    if (now === drawn) return;
    drawn = now;
    trials.draw(sweep);
    drawObjective(objectiveChart, sweep, Number(objectiveChoice.value || 0));
    drawTradeoff(tradeoff, sweep);
    drawParallel(parallel, sweep);
    drawPrecisionReport(report, sweep);
    best.draw(sweep);
  };

  objectiveChoice.addEventListener("change", () => drawObjective(objectiveChart, sweep, Number(objectiveChoice.value)));
  cancel.addEventListener("click", () => { confirm.hidden = false; });
  confirm.querySelector("#keep-sweep").addEventListener("click", () => { confirm.hidden = true; });
  confirm.querySelector("#confirm-cancel-sweep").addEventListener("click", async () => {
    confirm.hidden = true;
    try {
      // The watch goes on: the sweep has not settled while its trials are stopping.
      draw(await api(`/v1/sweeps/${encodeURIComponent(sweepId)}/cancel`, { method: "POST", signal: ctx.signal }));
      notice.textContent = "cancelled: its running trials are being stopped";
    } catch (error) {
      ctx.showError(error, "cancelling the sweep");
    }
  });

  const onError = (error) => {
    if (sweep === null) {
      ctx.showError(error, `loading sweep ${sweepId}`);
      fill(ctx.view, head, h("p", { class: "muted", id: "sweep-missing" }, "This sweep could not be loaded."));
      return false; // nothing to keep up to date
    }
    ctx.showError(error, "refreshing the sweep");
    return true;
  };
  return watchSweep(ctx, sweepId, draw, onError);
}
