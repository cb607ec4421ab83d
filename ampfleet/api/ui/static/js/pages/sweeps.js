// Sweeps: the list, newest first, refreshed in place; a row opens the sweep.
import { api } from "../api.js";
import { ageOf, h, stateBadge, syncRows } from "../dom.js";

const REFRESH_MS = 3000;
const PAGE = 50;
const MAX_PAGE = 200; // the API's largest page

/** "3 complete, 1 pruned, 2 running" from a sweep's trial counts. */
export function countsText(counts) {
  const parts = Object.entries(counts || {}).filter(([, n]) => n > 0).map(([state, n]) => `${n} ${state}`);
  return parts.length ? parts.join(", ") : "no trial yet";
}

function cells(sweep) {
  return [
    h("td", {}, h("a", { href: `#/sweeps/${sweep.id}`, class: "sweep-link" }, sweep.name || sweep.id),
      sweep.name ? h("div", { class: "muted small" }, sweep.id) : null),
    h("td", {}, stateBadge(sweep.state), sweep.reason ? h("div", { class: "muted small" }, sweep.reason) : null),
    h("td", { class: "project" }, sweep.project),
    h("td", { class: "counts" }, countsText(sweep.counts)),
    h("td", { class: "age", title: sweep.created_at }, ageOf(sweep.created_at)),
  ];
}

const shown = (sweep) => JSON.stringify([sweep.name, sweep.state, sweep.reason, sweep.counts]);

function row(sweep) {
  const open = () => { location.hash = `#/sweeps/${sweep.id}`; };
  return h("tr", {
    class: "clickable", dataset: { sweep: sweep.id, state: sweep.state, shown: shown(sweep) }, tabindex: 0,
    onclick: open, onkeydown: (e) => { if (e.key === "Enter") open(); },
  }, cells(sweep));
}

function updateRow(tr, sweep) {
  if (tr.dataset.shown !== shown(sweep)) {
    tr.dataset.shown = shown(sweep);
    tr.dataset.state = sweep.state;
    tr.replaceChildren(...cells(sweep));
  } else {
    tr.querySelector(".age").textContent = ageOf(sweep.created_at);
  }
}

export function sweepsPage(ctx) {
  const tbody = h("tbody");
  const status = h("span", { class: "muted small", id: "sweeps-status" });
  const more = h("button", { type: "button", class: "secondary", id: "sweeps-more", hidden: true }, "Older sweeps");
  ctx.view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Sweeps"), status),
    h("p", { class: "muted" }, "Searches over hyperparameters and precision whose trials are jobs: start one with ",
      h("code", {}, "ampfleet sweep sweep.yaml"), " or POST /v1/sweeps."),
    h("table", { class: "table", id: "sweeps-table" },
      h("thead", {}, h("tr", {}, ["Sweep", "State", "Project", "Trials", "Age"].map((t) => h("th", {}, t)))),
      tbody),
    more,
  );

  let sweeps = [];
  let cursor = null;
  let wanted = PAGE; // rows shown: the first page, and those "Older sweeps" added
  let timer = null;
  const rows = new Map();

  let work = Promise.resolve();
  // One load at a time (a click on "Older sweeps" waits for the one in flight), so there is
  // only ever one timer.
  const refresh = () => (work = work.then(load));
  const load = async () => {
    clearTimeout(timer);
    try {
      const page = await api(`/v1/sweeps?limit=${Math.min(wanted, MAX_PAGE)}`, { signal: ctx.signal });
      sweeps = page.items;
      cursor = page.next_cursor;
      syncRows(tbody, rows, sweeps, { key: (sweep) => sweep.id, create: row, update: updateRow });
      if (!sweeps.length) tbody.append(h("tr", {}, h("td", { colspan: 5, class: "muted empty" }, "No sweeps yet.")));
      more.hidden = !cursor || wanted >= MAX_PAGE;
      status.textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
    } catch (error) {
      ctx.showError(error, "listing sweeps");
    }
    if (!ctx.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  };
  more.addEventListener("click", () => {
    wanted += PAGE;
    refresh();
  });
  refresh();
  return () => clearTimeout(timer);
}
