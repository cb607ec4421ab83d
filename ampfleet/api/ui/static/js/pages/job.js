// One job: summary and actions, live progress and ETA, the state timeline, metric panels,
// artifacts with the model's manifest, and logs. One SSE stream (GET /v1/jobs/{id}/events)
// feeds the timeline, the progress (with the server's ETA and, while queued, where the job
// waits) and the charts; it resumes with Last-Event-ID after a dropped connection. The job
// itself (and its artifacts) is fetched again only when its state changes, for what the
// stream does not carry (attempt, timestamps, failure, what was stored). Ages ("created 2m
// ago", "running for", "finished ... ago") tick every second on the page's own clock; the
// headline metric is the job's main objective, from the metrics summary's goals.
import { api, follow } from "../api.js";
import { TERMINAL, ageOf, clockTime, commandText, duration, fill, h, num, progressBar, setProgress, stateBadge } from "../dom.js";
import { artifactsPanel } from "./jobartifacts.js";
import { samplesPanel } from "./jobsamples.js";
import { logsPanel } from "./joblogs.js";
import { MetricStore, drawMetrics, headline, metricPanels } from "./jobmetrics.js";
import { profilePanel } from "./jobprofile.js";
import { codePanel } from "./jobcode.js";
import { specPanel } from "./jobspec.js";

const EVENT_PAGE = 1000;
const HISTORY_POINTS = 2000; // per series: a long job's history comes downsampled
const TICK_MS = 1000;

function settingText(setting) {
  if (!setting.effective) return `${setting.requested} (requested)`;
  return setting.effective === setting.requested ? setting.effective : `${setting.effective} (requested ${setting.requested})`;
}

// Where the job's slot-seconds went (GET /v1/jobs/{id} only: actions answer without it).
const GOODPUT_KINDS = ["startup", "recomputed", "checkpoint", "evaluation", "pruned", "other"];
function goodputText(g) {
  if (!g || !g.allocated_slot_s) return "—";
  const share = (v) => `${((v / g.allocated_slot_s) * 100).toFixed(0)}%`;
  const lost = GOODPUT_KINDS.filter((k) => g[`${k}_slot_s`] > 0).map((k) => `${k} ${share(g[`${k}_slot_s`])}`);
  return `${share(g.training_slot_s)} of ${num(g.allocated_slot_s)} slot-seconds in training` +
    (lost.length ? `; ${lost.join(", ")}` : "") + ` (${g.attempts} attempt${g.attempts === 1 ? "" : "s"})`;
}

function timelineItem(event) {
  const transition = event.kind === "transition";
  return h("li", { class: `event ${transition ? "transition" : "info"}`, dataset: { id: event.id, to: event.to_state || "" } },
    h("time", { datetime: event.time, title: event.time }, clockTime(event.time)),
    h("span", { class: "muted small" }, ` #${event.attempt} `),
    transition
      ? h("span", { class: "arrow" }, event.from_state ? stateBadge(event.from_state) : null, event.from_state ? " → " : "", stateBadge(event.to_state))
      : h("span", { class: "badge info" }, "event"),
    " ",
    h("strong", {}, event.reason),
    event.message ? h("span", { class: "event-message" }, ` ${event.message}`) : null);
}

export function jobPage(ctx, jobId) {
  const store = new MetricStore();
  const events = new Map();
  const goals = new Map(); // metric name -> "min" | "max" | null, from the metrics summary
  let job = null;
  let goodput = null;
  let drawQueued = false;

  const head = h("div", { class: "page-head" }, h("a", { href: "#/jobs", class: "back" }, "← Jobs"), h("h1", {}, jobId));
  const summary = h("dl", { class: "summary", id: "job-summary" });
  const actions = h("div", { class: "actions", id: "job-actions" });
  const streamStatus = h("span", { id: "stream-status", class: "badge muted" }, "connecting");
  // Built once; a progress frame only changes their text.
  const bar = progressBar(0, null);
  const progressText = h("span", { id: "progress-text" });
  const eta = h("span", { id: "eta" });
  const loss = h("span", { id: "latest-loss" });
  const progress = h("div", { id: "job-progress", class: "job-progress" }, bar, progressText, eta, loss, streamStatus);
  const runFor = h("dd", { id: "job-run-for" });
  const created = h("dd", { id: "job-created" });
  const headlineTerm = h("dt", { id: "job-headline-name" });
  const headlineValue = h("dd", { id: "job-headline", class: "headline" });
  const spec = specPanel();
  const code = codePanel(ctx);
  // Where the latest attempt's start went, launch to first step (its start_phases event).
  const startTerm = h("dt", { hidden: true }, "start");
  const startLine = h("dd", { id: "job-start", hidden: true });
  const queueTerm = h("dt", {}, "queue");
  const queueLine = h("dd", { id: "job-queue" });
  const timeline = h("ol", { id: "timeline", class: "timeline" });
  const { el: charts, panels } = metricPanels();
  charts.lossLog.addEventListener("change", () => drawMetrics(charts, store, job));
  const artifacts = artifactsPanel(ctx, jobId);
  const samples = samplesPanel(ctx, jobId);
  const profile = profilePanel(ctx, jobId, { onDone: () => artifacts.load() });
  ctx.view.append(head, h("p", { class: "muted" }, "Loading…"));

  const runningFor = () => (job.started_at
    ? duration(((job.finished_at ? Date.parse(job.finished_at) : Date.now()) - Date.parse(job.started_at)) / 1000)
    : "—");

  const etaText = (p) => (p.eta_seconds === null || p.eta_seconds === undefined
    ? "ETA —"
    : `ETA ${duration(p.eta_seconds)}${p.eta_confidence ? ` (${p.eta_confidence} confidence)` : ""}`);

  // What moves with the clock alone: redrawn by the tick, and with every frame.
  const drawAges = () => {
    created.textContent = `${ageOf(job.created_at)} ago`;
    runFor.textContent = runningFor();
    if (TERMINAL.has(job.state)) eta.textContent = `finished ${ageOf(job.finished_at)} ago`;
  };

  const drawHeadline = () => {
    const shown = headline(goals, job.latest_metrics);
    headlineTerm.hidden = headlineValue.hidden = !shown;
    if (!shown) return;
    headlineTerm.textContent = `${TERMINAL.has(job.state) ? "final " : ""}${shown.name}`;
    headlineValue.textContent = `${num(shown.value)} (${shown.goal === "max" ? "higher" : "lower"} is better)`;
    headlineValue.dataset.metric = shown.name;
    headlineValue.dataset.value = String(shown.value);
  };

  const drawProgress = () => {
    const p = job.progress;
    setProgress(bar, p.step, p.total_steps);
    progressText.textContent = p.total_steps
      ? `step ${p.step} of ${p.total_steps} (${((p.step / p.total_steps) * 100).toFixed(0)}%)`
      : `step ${p.step}`;
    eta.textContent = etaText(p);
    const latest = job.latest_metrics.loss;
    loss.textContent = latest === undefined ? "" : `loss ${num(latest)}`;
    drawAges();
    drawHeadline();
  };

  const drawQueue = () => {
    const q = job.queue;
    queueTerm.hidden = queueLine.hidden = !q;
    if (!q) return;
    fill(queueLine, `#${q.position ?? "?"}`, q.pending_reason ? ` — ${q.pending_reason}` : "",
      q.estimated_start_at ? ` (est. start in ${duration((Date.parse(q.estimated_start_at) - Date.now()) / 1000)})` : "");
  };

  // On load, a state change and an action's answer: everything but the live parts.
  const drawSummary = () => {
    goodput = job.goodput ?? goodput;
    const jobState = stateBadge(job.state, { id: "job-state", "data-state": job.state });
    const command = job.spec.code?.command;
    fill(head.querySelector("h1"), job.name || job.id, " ", jobState);
    fill(summary,
      // A script job runs its command, not a recipe (its stored recipe names only the bundle).
      [["id", job.id], command ? ["command", commandText(command)] : ["recipe", job.recipe], ["project", job.project], ["attempt", String(job.attempt)],
        ["precision", settingText(job.precision)], ["AllReduce dtype", settingText(job.allreduce_dtype)]]
        .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      h("dt", {}, "goodput"), h("dd", { id: "job-goodput" }, goodputText(goodput)),
      h("dt", {}, "created"), created,
      h("dt", {}, "running for"), runFor,
      startTerm, startLine,
      headlineTerm, headlineValue,
      queueTerm, queueLine,
      job.failure_reason ? [h("dt", {}, "failure"), h("dd", { class: "failure" }, job.failure_reason)] : null);
    drawQueue();
    drawActions();
    drawProgress();
    profile.setJob(job);
  };

  // -- actions: priority and cancel ---------------------------------------------------------
  const priority = h("select", { id: "priority" }, ["low", "normal", "high"].map((p) => h("option", { value: p }, p)));
  const notice = h("span", { id: "action-notice", class: "muted small", role: "status" });
  const cancel = h("button", { type: "button", id: "cancel-job", class: "danger" }, "Cancel job");
  const confirm = h("span", { id: "cancel-confirm", class: "confirm", hidden: true }, "Stop every rank of this job? ",
    h("button", { type: "button", id: "confirm-cancel", class: "danger" }, "Yes, cancel it"), " ",
    h("button", { type: "button", id: "keep-running", class: "secondary" }, "Keep it"));

  const drawActions = () => {
    const over = TERMINAL.has(job.state);
    if (document.activeElement !== priority) priority.value = job.priority;
    priority.disabled = over;
    // An ended job has nothing to cancel: no button at all (a greyed one still reads as an
    // action). While it is being cancelled the button stays, disabled, until it ends.
    cancel.hidden = over;
    cancel.disabled = over || job.state === "CANCELLING";
    if (cancel.disabled) confirm.hidden = true;
    if (!actions.childElementCount) {
      fill(actions, h("label", {}, "Priority ", priority), cancel, confirm, notice);
    }
  };

  priority.addEventListener("change", async () => {
    const wanted = priority.value;
    try {
      job = await api(`/v1/jobs/${jobId}`, { method: "PATCH", body: { priority: wanted }, signal: ctx.signal });
      notice.textContent = `priority set to ${job.priority}`;
      drawSummary();
    } catch (error) {
      priority.value = job.priority;
      ctx.showError(error, "changing the priority");
    }
  });
  cancel.addEventListener("click", () => { confirm.hidden = false; });
  confirm.querySelector("#keep-running").addEventListener("click", () => { confirm.hidden = true; });
  confirm.querySelector("#confirm-cancel").addEventListener("click", async () => {
    confirm.hidden = true;
    try {
      job = await api(`/v1/jobs/${jobId}/cancel`, { method: "POST", signal: ctx.signal });
      notice.textContent = job.state === "CANCELLED" ? "cancelled" : "cancel requested: stopping every rank";
      drawSummary();
    } catch (error) {
      ctx.showError(error, "cancelling");
    }
  });

  // -- live data ------------------------------------------------------------------------------
  // Events come in id order (the listing, then the stream after its Last-Event-ID), so each
  // one is appended; one out of order is put in its place.
  const addEvent = (event) => {
    if (events.has(event.id)) return;
    events.set(event.id, event);
    if (event.reason === "start_phases" && event.id >= Number(startLine.dataset.event || 0)) {
      startLine.dataset.event = String(event.id);
      startLine.textContent = `${event.message} (attempt ${event.attempt})`;
      startTerm.hidden = startLine.hidden = false;
    }
    let before = timeline.lastElementChild;
    while (before && Number(before.dataset.id) > event.id) before = before.previousElementSibling;
    if (before) before.after(timelineItem(event));
    else timeline.prepend(timelineItem(event));
  };
  const queueDraw = () => {
    if (drawQueued) return;
    drawQueued = true;
    setTimeout(() => {
      drawQueued = false;
      if (!ctx.signal.aborted && job) drawMetrics(charts, store, job);
    }, 250);
  };

  // The goals of the series (which is an objective, which way is better), for the headline:
  // on load, and again when the state changes (the final evaluation brings new series).
  const loadGoals = (history) => {
    for (const series of history.series) goals.set(series.name, series.summary.goal);
  };
  const refreshGoals = () => api(`/v1/jobs/${jobId}/metrics?max_points=2`, { signal: ctx.signal })
    .then((answer) => { loadGoals(answer); drawHeadline(); })
    .catch((error) => ctx.showError(error, "reading the job's metrics"));

  // Single flight, and once more after it when asked meanwhile: the last answer is the newest.
  let refreshing = null;
  let again = false;
  const refresh = () => {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = api(`/v1/jobs/${jobId}`, { signal: ctx.signal })
      .then((fresh) => { job = fresh; drawSummary(); queueDraw(); refreshGoals(); })
      .catch((error) => ctx.showError(error, "refreshing the job"))
      .finally(() => {
        refreshing = null;
        if (again && !ctx.signal.aborted) {
          again = false;
          refresh();
        }
      });
  };

  const onFrame = (event, data) => {
    if (event === "state" || event === "event") {
      addEvent(data);
      if (event === "state" || data.reason === "profile") profile.load(); // a job leaving RUNNING ends its profile
      if (event === "state" && data.to_state) {
        artifacts.load(); // a SUCCEEDED job's model is listed by then; a requeue's checkpoint too
        samples.load();
        if (data.to_state !== job.state) {
          job.state = data.to_state;
          drawSummary();
        }
        refresh();
      }
    } else if (event === "metrics") {
      store.add(data.points || []);
      queueDraw();
      // An evaluation's metrics: its samples are listed about now.
      if ((data.points || []).some((p) => p.name.startsWith("val_"))) samples.load();
    } else if (event === "progress") {
      const stateChanged = data.state !== job.state;
      job.state = data.state;
      job.progress.step = data.step;
      job.progress.total_steps = data.total_steps;
      job.progress.eta_seconds = data.eta_seconds ?? null;
      job.progress.eta_confidence = data.eta_confidence ?? null;
      job.latest_metrics = data.latest_metrics || job.latest_metrics;
      if ("queue" in data) {
        job.queue = data.queue;
        drawQueue();
      }
      if (stateChanged) {
        drawSummary();
        refresh();
      } else {
        drawProgress();
      }
    } else if (event === "end") {
      refresh();
    }
  };

  const start = async () => {
    let history = null;
    try {
      job = await api(`/v1/jobs/${jobId}`, { signal: ctx.signal });
      for (let after = 0; after !== null && after !== undefined;) {
        const page = await api(`/v1/jobs/${jobId}/events?after=${after}&limit=${EVENT_PAGE}`, { signal: ctx.signal });
        for (const event of page.items) addEvent(event);
        after = page.next_after; // null on the last page
      }
      history = await api(`/v1/jobs/${jobId}/metrics?max_points=${HISTORY_POINTS}`, { signal: ctx.signal });
      loadGoals(history);
      for (const series of history.series) {
        store.add(series.points.map(({ step, value }) => ({ name: series.name, step, value })));
      }
    } catch (error) {
      if (error.name === "AbortError") return;
      ctx.showError(error, `loading job ${jobId}`);
      fill(ctx.view, head, h("p", { class: "muted", id: "job-missing" }, "This job could not be loaded."));
      return;
    }
    fill(ctx.view,
      head,
      h("section", { class: "panel wide" }, summary, actions, progress),
      h("div", { class: "grid" }, panels, h("section", { class: "panel" }, h("h2", {}, "Timeline"), timeline), spec.el, code.el),
      samples.el,
      profile.el,
      artifacts.el,
      logsPanel(ctx, jobId, job.gang_size, !TERMINAL.has(job.state)));
    drawSummary();
    spec.draw(job.spec);
    code.draw(job.spec);
    drawMetrics(charts, store, job);
    artifacts.load();
    samples.load();
    profile.load();
    const ticker = setInterval(() => { if (job) drawAges(); }, TICK_MS);
    ctx.signal.addEventListener("abort", () => clearInterval(ticker));
    const lastEvent = Math.max(0, ...events.keys());
    follow(`/v1/jobs/${jobId}/events`, {
      signal: ctx.signal,
      // Events already listed, metrics already loaded (downsampled): only what comes next.
      lastEventId: `${lastEvent}:${history.last_metric_id}`,
      onFrame,
      onStatus: (value, error) => {
        streamStatus.textContent = value;
        streamStatus.className = `badge stream-${value}`;
        if (error && value === "failed") ctx.showError(error, "following the job");
      },
    });
  };

  start();
}
