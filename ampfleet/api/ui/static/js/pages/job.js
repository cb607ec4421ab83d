// One job: summary and actions, live progress and ETA, the state timeline, metric panels
// and logs. One SSE stream (GET /v1/jobs/{id}/events) feeds the timeline, the progress
// and the charts; it resumes with Last-Event-ID after a dropped connection.
import { api, follow } from "../api.js";
import { TERMINAL, ageOf, clockTime, duration, fill, h, num, progressBar, stateBadge } from "../dom.js";
import { logsPanel } from "./joblogs.js";
import { MetricStore, drawMetrics, metricPanels } from "./jobmetrics.js";

const REFRESH_MS = 5000;
const PACE_WINDOW_MS = 60000;
const EVENT_PAGE = 1000;
const HISTORY_POINTS = 2000; // per series: a long job's history comes downsampled

function settingText(setting) {
  if (!setting.effective) return `${setting.requested} (requested)`;
  return setting.effective === setting.requested ? setting.effective : `${setting.effective} (requested ${setting.requested})`;
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
  const samples = []; // [time ms, step] from progress frames: the live pace
  let job = null;
  let fetchedAt = 0;
  let timers = [];
  let drawQueued = false;

  const head = h("div", { class: "page-head" }, h("a", { href: "#/jobs", class: "back" }, "← Jobs"), h("h1", {}, jobId));
  const summary = h("dl", { class: "summary", id: "job-summary" });
  const actions = h("div", { class: "actions", id: "job-actions" });
  const progress = h("div", { id: "job-progress", class: "job-progress" });
  const streamStatus = h("span", { id: "stream-status", class: "badge muted" }, "connecting");
  const timeline = h("ol", { id: "timeline", class: "timeline" });
  const { el: charts, panels } = metricPanels();
  ctx.view.append(head, h("p", { class: "muted" }, "Loading…"));

  const liveEta = () => {
    if (!job || TERMINAL.has(job.state) || !job.progress.total_steps) return null;
    const now = Date.now();
    while (samples.length > 2 && now - samples[0][0] > PACE_WINDOW_MS) samples.shift();
    if (samples.length >= 2) {
      const [t0, s0] = samples[0];
      const [t1, s1] = samples[samples.length - 1];
      if (s1 > s0 && t1 - t0 >= 2000) return (job.progress.total_steps - s1) / ((s1 - s0) / ((t1 - t0) / 1000));
    }
    const eta = job.progress.eta_seconds;
    return eta === null || eta === undefined ? null : Math.max(eta - (now - fetchedAt) / 1000, 0);
  };

  const drawProgress = () => {
    if (!job) return;
    const p = job.progress;
    const eta = liveEta();
    const loss = job.latest_metrics.loss;
    fill(progress,
      progressBar(p.step, p.total_steps),
      h("span", { id: "progress-text" }, p.total_steps ? `step ${p.step} of ${p.total_steps} (${((p.step / p.total_steps) * 100).toFixed(0)}%)` : `step ${p.step}`),
      h("span", { id: "eta" }, TERMINAL.has(job.state) ? `finished ${ageOf(job.finished_at)} ago` : `ETA ${eta === null ? "—" : duration(eta)}`),
      loss !== undefined ? h("span", {}, `loss ${num(loss)}`) : null,
      streamStatus);
  };

  const drawSummary = () => {
    const jobState = stateBadge(job.state, { id: "job-state", "data-state": job.state });
    fill(head.querySelector("h1"), job.name || job.id, " ", jobState);
    const run = job.started_at ? duration(((job.finished_at ? Date.parse(job.finished_at) : Date.now()) - Date.parse(job.started_at)) / 1000) : "—";
    const q = job.queue;
    fill(summary,
      [["id", job.id], ["recipe", job.recipe], ["project", job.project], ["attempt", String(job.attempt)],
        ["precision", settingText(job.precision)], ["AllReduce dtype", settingText(job.allreduce_dtype)],
        ["created", `${ageOf(job.created_at)} ago`], ["running for", run]]
        .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      q ? [h("dt", {}, "queue"), h("dd", { id: "job-queue" }, `#${q.position ?? "?"}`, q.pending_reason ? ` — ${q.pending_reason}` : "",
        q.estimated_start_at ? ` (est. start in ${duration((Date.parse(q.estimated_start_at) - Date.now()) / 1000)})` : "")] : null,
      job.failure_reason ? [h("dt", {}, "failure"), h("dd", { class: "failure" }, job.failure_reason)] : null);
    drawActions();
    drawProgress();
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
      fetchedAt = Date.now();
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
      fetchedAt = Date.now();
      notice.textContent = job.state === "CANCELLED" ? "cancelled" : "cancel requested: stopping every rank";
      drawSummary();
    } catch (error) {
      ctx.showError(error, "cancelling");
    }
  });

  // -- live data ------------------------------------------------------------------------------
  const drawTimeline = () => fill(timeline, [...events.values()].sort((a, b) => a.id - b.id).map(timelineItem));
  const queueDraw = () => {
    if (drawQueued) return;
    drawQueued = true;
    setTimeout(() => {
      drawQueued = false;
      if (!ctx.signal.aborted && job) drawMetrics(charts, store, job);
    }, 250);
  };

  let refreshing = null;
  const refresh = async () => {
    if (refreshing) return refreshing;
    refreshing = api(`/v1/jobs/${jobId}`, { signal: ctx.signal })
      .then((fresh) => { job = fresh; fetchedAt = Date.now(); drawSummary(); queueDraw(); })
      .catch((error) => ctx.showError(error, "refreshing the job"))
      .finally(() => { refreshing = null; });
    return refreshing;
  };

  const onFrame = (event, data) => {
    if (event === "state" || event === "event") {
      events.set(data.id, data);
      drawTimeline();
      if (event === "state" && data.to_state && job) {
        job.state = data.to_state;
        drawSummary();
        refresh();
      }
    } else if (event === "metrics") {
      store.add(data.points || []);
      queueDraw();
    } else if (event === "progress" && job) {
      job.state = data.state;
      job.progress.step = data.step;
      job.progress.total_steps = data.total_steps;
      job.latest_metrics = data.latest_metrics || job.latest_metrics;
      samples.push([Date.now(), data.step]);
      drawSummary();
    } else if (event === "end") {
      refresh();
    }
  };

  const start = async () => {
    let history = null;
    try {
      job = await api(`/v1/jobs/${jobId}`, { signal: ctx.signal });
      fetchedAt = Date.now();
      let after = 0;
      for (;;) {
        const page = await api(`/v1/jobs/${jobId}/events?after=${after}&limit=${EVENT_PAGE}`, { signal: ctx.signal });
        for (const event of page.items) events.set(event.id, event);
        if (page.items.length < EVENT_PAGE) break;
        after = page.items[page.items.length - 1].id;
      }
      history = await api(`/v1/jobs/${jobId}/metrics?max_points=${HISTORY_POINTS}`, { signal: ctx.signal });
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
      h("div", { class: "grid" }, panels, h("section", { class: "panel" }, h("h2", {}, "Timeline"), timeline)),
      logsPanel(ctx, jobId, job.gang_size, !TERMINAL.has(job.state)));
    drawSummary();
    drawTimeline();
    drawMetrics(charts, store, job);
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
    timers.push(setInterval(() => { if (job && !TERMINAL.has(job.state)) refresh(); }, REFRESH_MS));
    timers.push(setInterval(drawProgress, 1000));
  };

  start();
  return () => { for (const timer of timers) clearInterval(timer); timers = []; };
}
