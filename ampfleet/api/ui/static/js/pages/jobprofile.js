// Profiles on demand on the job page: a "Profile 5 steps" button for a RUNNING job (POST
// /v1/jobs/{id}/profile), the latest profile's state, polled while it is not over, and once
// it is done its summary (step time, backward's share, communication hidden behind compute,
// the top operators) and a download per file (a trace per rank, summary.json), saved as the
// artifacts panel saves any artifact. Traces open in ui.perfetto.dev or chrome://tracing.
import { api } from "../api.js";
import { fill, h, num } from "../dom.js";
import { downloadArtifact } from "./jobartifacts.js";

const STEPS = 5;
const POLL_MS = 1000;
const FINAL = new Set(["done", "failed", "cancelled"]);
const TOP_SHOWN = 5;

function share(value) {
  return value === null || value === undefined ? "—" : `${(value * 100).toFixed(0)}%`;
}

function summaryView(summary) {
  const overall = summary.overall || {};
  const ranks = Object.keys(summary.ranks || {}).sort((a, b) => Number(a) - Number(b));
  const first = ranks.length ? summary.ranks[ranks[0]] : null;
  const onDevice = summary.device === "cuda";
  return [
    h("dl", { class: "summary", id: "profile-figures" },
      [["steps", `${summary.start_step}–${summary.end_step}`],
        ["step time", `${num(overall.step_time_s)} s`],
        ["backward", `${share(overall.backward_share)} of the step`],
        ["communication hidden", share(overall.communication_hidden_share)]]
        .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    first ? h("table", { class: "table", id: "profile-top" },
      h("thead", {}, h("tr", {}, h("th", {}, `Top operators, rank ${ranks[0]}`), h("th", {}, "Calls"),
        h("th", {}, `Self ${onDevice ? "device" : "CPU"} time (s)`))),
      h("tbody", {}, first.top_operators.slice(0, TOP_SHOWN).map((op) =>
        h("tr", {}, h("td", {}, h("code", {}, op.name)), h("td", {}, String(op.calls)),
          h("td", {}, num(onDevice ? op.self_device_s : op.self_cpu_s)))))) : null,
  ];
}

/**
 * The profile panel of job `jobId`: `setJob(job)` on every change, `load()` to re-read;
 * `onDone()` is called when a profile it shows becomes done (its files are listed by then).
 */
export function profilePanel(ctx, jobId, { onDone = () => {} } = {}) {
  const path = `/v1/jobs/${encodeURIComponent(jobId)}/profile`;
  const button = h("button", { type: "button", id: "profile-job", class: "secondary", disabled: true },
    `Profile ${STEPS} steps`);
  const state = h("p", { id: "profile-state", class: "muted" },
    "No profile yet: a RUNNING job's ranks capture steps with torch.profiler when asked.");
  const details = h("div", { id: "profile-details" });
  let latest = null;
  let jobState = null;
  let polling = null;

  const drawButton = () => {
    button.disabled = jobState !== "RUNNING" || (latest !== null && !FINAL.has(latest.state)
      && latest.state !== "uploading");
  };

  const fileRow = (artifact) => {
    const status = h("span", { class: "download-status muted small", role: "status" });
    const download = h("button", { type: "button", class: "download secondary", disabled: !artifact.listed },
      "Download");
    const row = h("li", { dataset: { artifact: artifact.name } }, h("code", {}, artifact.name), " ", download, " ", status);
    download.addEventListener("click", () => downloadArtifact(ctx, jobId, artifact, { button: download, status, row }));
    return row;
  };

  const draw = () => {
    drawButton();
    if (!latest) return;
    const range = latest.start_step === null ? "" : ` from step ${latest.start_step}`;
    state.dataset.state = latest.state;
    fill(state, h("strong", {}, latest.state), ` ${latest.id}: ${latest.steps} steps on `,
      latest.ranks ? `ranks ${latest.ranks.join(", ")}` : "every rank", range,
      latest.reason ? ` — ${latest.reason}` : "");
    fill(details,
      latest.state === "done" && latest.summary ? summaryView(latest.summary) : null,
      latest.artifacts.length ? h("ul", { id: "profile-files" }, latest.artifacts.map(fileRow)) : null,
      latest.state === "done"
        ? h("p", { class: "muted small" }, "Open a trace in ui.perfetto.dev (Open trace file) or chrome://tracing.")
        : null);
  };

  const poll = () => {
    if (polling || ctx.signal.aborted || !latest || FINAL.has(latest.state)) return;
    polling = setTimeout(() => { polling = null; load(); }, POLL_MS);
  };

  const load = () => api(path, { signal: ctx.signal })
    .then((answer) => {
      const finished = answer.state === "done" && latest?.state !== "done";
      latest = answer;
      draw();
      poll();
      if (finished) onDone();
    })
    .catch((error) => {
      if (error.name === "AbortError") return;
      if (error.status !== 404) ctx.showError(error, "reading the job's profile"); // 404: none yet
    });

  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      latest = await api(path, { method: "POST", body: { steps: STEPS }, signal: ctx.signal });
      draw();
      poll();
    } catch (error) {
      ctx.showError(error, "asking for a profile");
      drawButton();
    }
  });
  ctx.signal.addEventListener("abort", () => clearTimeout(polling));

  const setJob = (job) => {
    jobState = job.state;
    drawButton();
  };

  const el = h("section", { class: "panel wide", id: "profile" },
    h("div", { class: "panel-head" }, h("h2", {}, "Profile"), button), state, details);
  return { el, setJob, load };
}
