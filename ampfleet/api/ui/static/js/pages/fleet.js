// Fleet: every node's slots (one box per GPU or CPU slot), liveness, heartbeat age and why it is
// cordoned (an operator, or the platform after repeated hangs); the
// queue in the order the scheduler will consider it (GET /v1/queue, ordered on the server),
// with why each job waits. Queue rows are updated in place on each refresh.
import { api } from "../api.js";
import { ageOf, duration, fill, h, num, syncRows } from "../dom.js";

const REFRESH_MS = 2000;
const QUEUE_PAGE = 50; // rows shown at first, and added by "Later jobs"
const MAX_PAGE = 200; // the API's largest page

function nodeCard(node) {
  const boxes = Array.from({ length: node.slots }, (_, i) =>
    h("span", { class: `slot ${i < node.used_slots ? "used" : "free"}`, title: i < node.used_slots ? "in use" : "free" }));
  const health = node.alive ? "alive" : "dead";
  return h("article", { class: `node ${health} ${node.state}`, dataset: { node: node.id } },
    h("header", {},
      h("strong", { class: "node-id" }, node.id), " ",
      h("span", { class: `badge node-${health}` }, health), " ",
      h("span", { class: `badge node-${node.state}`, title: node.state_reason || "" }, node.state)),
    node.state_reason ? h("div", { class: "small state-reason" }, node.state_reason) : null,
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

function queueCells(entry) {
  return [
    h("td", { class: "position" }, String(entry.position)),
    h("td", {}, h("a", { href: `#/jobs/${entry.id}` }, entry.name || entry.id)),
    h("td", { class: "project" }, entry.project),
    h("td", { class: "priority" }, entry.priority),
    h("td", {}, `${entry.gang_size}`),
    h("td", { class: "pending-reason" }, entry.pending_reason || "—"),
    h("td", {}, entry.estimated_start_at ? `in ${duration((Date.parse(entry.estimated_start_at) - Date.now()) / 1000)}` : "unknown"),
    h("td", {}, ageOf(entry.created_at)),
  ];
}

function queueRow(entry) {
  const open = () => { location.hash = `#/jobs/${entry.id}`; };
  return h("tr", { class: "clickable", dataset: { job: entry.id }, onclick: open }, queueCells(entry));
}

export function fleetPage(ctx) {
  const nodes = h("div", { id: "nodes", class: "nodes" });
  const totals = h("span", { class: "muted small", id: "fleet-totals" });
  const queue = h("tbody");
  const later = h("button", { type: "button", class: "secondary", id: "queue-more", hidden: true }, "Later jobs");
  ctx.view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Fleet"), totals),
    h("section", { class: "panel wide" }, h("h2", {}, "Nodes"), nodes),
    h("section", { class: "panel wide" }, h("h2", {}, "Queue"),
      h("table", { class: "table", id: "queue" },
        h("thead", {}, h("tr", {}, ["#", "Job", "Project", "Priority", "Slots", "Waiting because", "Estimated start", "Queued for"].map((t) => h("th", {}, t)))),
        queue),
      later));

  let wanted = QUEUE_PAGE; // the head of the queue this page shows
  const rows = new Map(); // job id -> its <tr>
  let timer = null;

  // The first `wanted` entries of the queue, a page (at most the API's largest) at a time.
  const queueHead = async () => {
    let entries = [];
    let cursor = null;
    let total = 0;
    do {
      const params = new URLSearchParams({ limit: String(Math.min(wanted - entries.length, MAX_PAGE)) });
      if (cursor) params.set("cursor", cursor);
      const page = await api(`/v1/queue?${params}`, { signal: ctx.signal });
      entries = entries.concat(page.items);
      cursor = page.next_cursor;
      total = page.total;
    } while (cursor && entries.length < wanted);
    return { entries, total, more: Boolean(cursor) };
  };

  const drawQueue = ({ entries, more }) => {
    syncRows(queue, rows, entries, {
      key: (entry) => entry.id,
      create: queueRow,
      update: (tr, entry) => tr.replaceChildren(...queueCells(entry)),
    });
    if (!entries.length) queue.append(h("tr", {}, h("td", { colspan: 8, class: "muted empty" }, "The queue is empty.")));
    later.hidden = !more;
  };

  let work = Promise.resolve();
  // One refresh at a time: a click on "Later jobs" waits for the one in flight.
  const refresh = () => (work = work.then(async () => {
    clearTimeout(timer);
    try {
      const [nodeList, head] = await Promise.all([api("/v1/nodes", { signal: ctx.signal }), queueHead()]);
      const items = nodeList.items;
      fill(nodes, items.length ? items.map(nodeCard) : h("p", { class: "muted" }, "No node has registered."));
      const slots = items.reduce((sum, n) => sum + n.slots, 0);
      const used = items.reduce((sum, n) => sum + n.used_slots, 0);
      totals.textContent = `${items.filter((n) => n.alive).length} of ${items.length} nodes alive · ${used} of ${slots} slots used · ${head.total} queued`;
      drawQueue(head);
    } catch (error) {
      ctx.showError(error, "loading the fleet");
    }
    if (!ctx.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  }));

  later.addEventListener("click", () => {
    wanted += QUEUE_PAGE;
    refresh();
  });
  refresh();
  return () => clearTimeout(timer);
}
