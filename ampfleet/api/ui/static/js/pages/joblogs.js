// A job's log lines per rank: the tail, then a live follow (SSE) that resumes by line id.
import { api, follow } from "../api.js";
import { clockTime, fill, h } from "../dom.js";

const TAIL = 500;
const KEEP = 5000; // lines kept on the page

export function logsPanel(ctx, jobId, worldSize, initiallyFollowing) {
  const rank = h("select", { id: "log-rank" }, h("option", { value: "" }, "all ranks"),
    Array.from({ length: worldSize }, (_, r) => h("option", { value: String(r) }, `rank ${r}`)));
  const stream = h("select", { id: "log-stream" }, h("option", { value: "" }, "stdout + stderr"),
    h("option", { value: "stdout" }, "stdout"), h("option", { value: "stderr" }, "stderr"));
  const following = h("input", { type: "checkbox", id: "log-follow", checked: initiallyFollowing });
  const status = h("span", { class: "muted small", id: "log-status" });
  const box = h("div", { id: "logs", class: "logs", tabindex: 0 });
  const panel = h("section", { class: "panel wide" },
    h("div", { class: "panel-head" }, h("h2", {}, "Logs"),
      h("label", {}, "Rank ", rank), h("label", {}, "Stream ", stream),
      h("label", {}, following, " follow"), status),
    box);

  let lastId = 0;
  let running = null; // the AbortController of the current load/follow

  const filters = () => {
    const params = new URLSearchParams();
    if (rank.value !== "") params.set("rank", rank.value);
    if (stream.value) params.set("stream", stream.value);
    return params;
  };

  const append = (lines) => {
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    if (lines.length) box.querySelector(".log-empty")?.remove();
    for (const line of lines) {
      lastId = Math.max(lastId, line.id);
      box.append(h("div", { class: `log-line ${line.stream}`, dataset: { rank: line.rank, id: line.id } },
        h("span", { class: "log-meta" }, `${clockTime(line.time)} r${line.rank}${line.attempt > 1 ? ` a${line.attempt}` : ""} `),
        line.line));
    }
    while (box.childElementCount > KEEP) box.firstElementChild.remove();
    if (lines.length && (atBottom || following.checked)) box.scrollTop = box.scrollHeight;
  };

  const startFollow = (signal) => {
    follow(`/v1/jobs/${jobId}/logs?${filters()}`, {
      signal,
      lastEventId: String(lastId),
      onFrame: (event, data) => { if (event === "logs") append(data.lines || []); },
      onStatus: (value, error) => {
        status.textContent = value === "ended" ? "the job has ended: no more lines" : value;
        if (error && value === "failed") ctx.showError(error, "following logs");
      },
    });
  };

  const restart = async () => {
    if (running) running.abort();
    const controller = new AbortController();
    running = controller;
    lastId = 0;
    fill(box);
    status.textContent = "loading…";
    const params = filters();
    params.set("tail", String(TAIL));
    try {
      const page = await api(`/v1/jobs/${jobId}/logs?${params}`, { signal: controller.signal });
      append(page.items);
      status.textContent = page.dropped_lines ? `${page.dropped_lines} lines dropped over the job's log volume limit` : "";
      if (!page.items.length) box.append(h("div", { class: "muted log-empty" }, "No lines yet."));
    } catch (error) {
      if (error.name !== "AbortError") ctx.showError(error, "loading logs");
      return;
    }
    if (following.checked && !controller.signal.aborted) startFollow(controller.signal);
  };

  rank.addEventListener("change", restart);
  stream.addEventListener("change", restart);
  following.addEventListener("change", () => {
    if (running) running.abort();
    running = new AbortController();
    if (following.checked) {
      startFollow(running.signal);
    } else {
      status.textContent = "paused";
    }
  });
  ctx.signal.addEventListener("abort", () => running && running.abort(), { once: true });
  restart();
  return panel;
}
