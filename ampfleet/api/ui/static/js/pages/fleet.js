// Fleet: every node's slots (one box per GPU or CPU slot), liveness and heartbeat age; the
// queue in the order the scheduler will place it, with why each job waits.
import { api } from "../api.js";
import { ageOf, duration, fill, h, num } from "../dom.js";

const REFRESH_MS = 2000;

function nodeCard(node) {
  const boxes = Array.from({ length: node.slots }, (_, i) =>
    h("span", { class: `slot ${i < node.used_slots ? "used" : "free"}`, title: i < node.used_slots ? "in use" : "free" }));
  const health = node.alive ? "alive" : "dead";
  return h("article", { class: `node ${health} ${node.state}`, dataset: { node: node.id } },
    h("header", {},
      h("strong", { class: "node-id" }, node.id), " ",
      h("span", { class: `badge node-${health}` }, health), " ",
      h("span", { class: `badge node-${node.state}` }, node.state)),
    h("div", { class: "muted small" },
      node.accelerator === "cuda"
        ? `${node.gpu_model || "GPU"}${node.gpu_memory_mb ? `, ${num(node.gpu_memory_mb / 1024)} GiB` : ""}`
        : "CPU slots"),
    h("div", { class: "slots", "aria-label": `${node.used_slots} of ${node.slots} slots used` }, boxes),
    h("div", { class: "small" },
      h("span", { class: "slot-count" }, `${node.used_slots} used / ${node.free_slots} free`),
      h("span", { class: "muted" }, ` · heartbeat ${duration(node.heartbeat_age_seconds)} ago`)),
    Object.keys(node.labels || {}).length
      ? h("div", { class: "labels" }, Object.entries(node.labels).map(([k, v]) => h("span", { class: "label" }, `${k}=${v}`)))
      : null);
}

function queueRow(job) {
  const q = job.queue || {};
  const open = () => { location.hash = `#/jobs/${job.id}`; };
  return h("tr", { class: "clickable", dataset: { job: job.id }, onclick: open },
    h("td", { class: "position" }, q.position ?? "—"),
    h("td", {}, h("a", { href: `#/jobs/${job.id}` }, job.name || job.id)),
    h("td", {}, job.project),
    h("td", {}, job.priority),
    h("td", {}, `${job.gang_size}`),
    h("td", { class: "pending-reason" }, q.pending_reason || "—"),
    h("td", {}, q.estimated_start_at ? `in ${duration((Date.parse(q.estimated_start_at) - Date.now()) / 1000)}` : "unknown"),
    h("td", {}, ageOf(job.created_at)));
}

export function fleetPage(ctx) {
  const nodes = h("div", { id: "nodes", class: "nodes" });
  const totals = h("span", { class: "muted small", id: "fleet-totals" });
  const queue = h("tbody");
  ctx.view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Fleet"), totals),
    h("section", { class: "panel wide" }, h("h2", {}, "Nodes"), nodes),
    h("section", { class: "panel wide" }, h("h2", {}, "Queue"),
      h("table", { class: "table", id: "queue" },
        h("thead", {}, h("tr", {}, ["#", "Job", "Project", "Priority", "Slots", "Waiting because", "Estimated start", "Queued for"].map((t) => h("th", {}, t)))),
        queue)));

  let timer = null;
  const refresh = async () => {
    try {
      const [nodeList, queued] = await Promise.all([
        api("/v1/nodes", { signal: ctx.signal }),
        api("/v1/jobs?state=QUEUED&limit=200", { signal: ctx.signal }),
      ]);
      const items = nodeList.items;
      fill(nodes, items.length ? items.map(nodeCard) : h("p", { class: "muted" }, "No node has registered."));
      const slots = items.reduce((sum, n) => sum + n.slots, 0);
      const used = items.reduce((sum, n) => sum + n.used_slots, 0);
      totals.textContent = `${items.filter((n) => n.alive).length} of ${items.length} nodes alive · ${used} of ${slots} slots used · ${queued.items.length} queued`;
      const ordered = [...queued.items].sort((a, b) => (a.queue?.position ?? Infinity) - (b.queue?.position ?? Infinity));
      fill(queue, ordered.length ? ordered.map(queueRow) : h("tr", {}, h("td", { colspan: 8, class: "muted empty" }, "The queue is empty.")));
    } catch (error) {
      ctx.showError(error, "loading the fleet");
    }
    if (!ctx.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  };
  refresh();
  return () => clearTimeout(timer);
}
