// Jobs: the list (newest first) with state and project filters; a row opens the job. The
// list refreshes in place: rows that did not change are left alone.
import { api } from "../api.js";
import { STATES, TERMINAL, ageOf, fill, h, precisionText, progressBar, stateBadge, syncRows } from "../dom.js";

const REFRESH_MS = 3000;
const PAGE = 50;
const MAX_PAGE = 200; // the API's largest page
const GROUPS = {
  active: STATES.filter((s) => !TERMINAL.has(s)),
  finished: [...TERMINAL],
};

function statesOf(filter) {
  if (!filter) return [];
  return GROUPS[filter] || (STATES.includes(filter) ? [filter] : []);
}

function query(filters, limit, cursor) {
  const params = new URLSearchParams();
  for (const state of statesOf(filters.state)) params.append("state", state);
  if (filters.project) params.set("project", filters.project);
  params.set("limit", String(limit));
  if (cursor) params.set("cursor", cursor);
  return `/v1/jobs?${params}`;
}

function cells(job) {
  const precision = precisionText(job.precision);
  const wire = precisionText(job.allreduce_dtype);
  return [
    h("td", {}, h("a", { href: `#/jobs/${job.id}`, class: "job-link" }, job.name || job.id),
      job.name ? h("div", { class: "muted small" }, job.id) : null),
    h("td", {}, stateBadge(job.state)),
    h("td", { class: "project" }, job.project),
    h("td", { class: "precision", title: `requested ${job.precision.requested}` }, precision,
      job.precision.effective && job.precision.effective !== job.precision.requested
        ? h("span", { class: "muted small" }, ` (${job.precision.requested})`) : null),
    h("td", { class: "allreduce", title: `requested ${job.allreduce_dtype.requested}` }, wire),
    h("td", {}, progressBar(job.progress.step, job.progress.total_steps)),
    h("td", { class: "age", title: job.created_at }, ageOf(job.created_at)),
  ];
}

// What a row shows, but its age: a row is redrawn only when this changes.
const shown = (job) => JSON.stringify([job.name, job.state, job.precision, job.allreduce_dtype, job.progress.step, job.progress.total_steps]);

function row(job) {
  const open = () => { location.hash = `#/jobs/${job.id}`; };
  return h(
    "tr",
    { class: "clickable", dataset: { job: job.id, state: job.state, shown: shown(job) }, tabindex: 0, onclick: open,
      onkeydown: (e) => { if (e.key === "Enter") open(); } },
    cells(job),
  );
}

function updateRow(tr, job) {
  const now = shown(job);
  if (tr.dataset.shown !== now) {
    tr.dataset.shown = now;
    tr.dataset.state = job.state;
    tr.replaceChildren(...cells(job));
  } else {
    tr.querySelector(".age").textContent = ageOf(job.created_at);
  }
}

export function jobsPage(ctx, params) {
  const filters = { state: params.get("state") || "", project: params.get("project") || "" };
  const setFilters = (change) => {
    const next = new URLSearchParams();
    const merged = { ...filters, ...change };
    if (merged.state) next.set("state", merged.state);
    if (merged.project) next.set("project", merged.project);
    const text = next.toString();
    location.hash = text ? `#/jobs?${text}` : "#/jobs";
  };

  const stateSelect = h(
    "select",
    { id: "filter-state", onchange: (e) => setFilters({ state: e.target.value }) },
    h("option", { value: "" }, "any state"),
    h("option", { value: "active" }, "active (not finished)"),
    h("option", { value: "finished" }, "finished"),
    STATES.map((s) => h("option", { value: s }, s)),
  );
  stateSelect.value = filters.state;
  const projects = h("datalist", { id: "project-names" });
  const projectInput = h("input", {
    id: "filter-project", list: "project-names", placeholder: "any project", value: filters.project,
    onchange: (e) => setFilters({ project: e.target.value.trim() }),
  });
  const tbody = h("tbody");
  const status = h("span", { class: "muted small", id: "jobs-status" });
  const more = h("button", { type: "button", class: "secondary", id: "jobs-more", hidden: true }, "Older jobs");

  ctx.view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Jobs"), status),
    h("div", { class: "filters" },
      h("label", {}, "State ", stateSelect),
      h("label", {}, "Project ", projectInput, projects),
      filters.state || filters.project
        ? h("button", { type: "button", class: "secondary", onclick: () => { location.hash = "#/jobs"; } }, "Clear filters")
        : null),
    h("table", { class: "table", id: "jobs-table" },
      h("thead", {}, h("tr", {}, ["Job", "State", "Project", "Precision", "AllReduce", "Progress", "Age"].map((t) => h("th", {}, t)))),
      tbody),
    more,
  );

  let jobs = [];
  let cursor = null; // where "Older jobs" goes on from
  let timer = null;
  const rows = new Map(); // job id -> its <tr>, kept across refreshes
  let work = Promise.resolve();
  // A refresh and an "Older jobs" load run one after the other: neither sees half the other.
  const serially = (task) => (work = work.then(task));

  const draw = () => {
    syncRows(tbody, rows, jobs, { key: (job) => job.id, create: row, update: updateRow });
    if (!jobs.length) tbody.append(h("tr", {}, h("td", { colspan: 7, class: "muted empty" }, "No jobs match.")));
    more.hidden = !cursor;
  };

  // Everything from the newest job down to the oldest one shown, so rows loaded with
  // "Older jobs" stay and stay current; ids are time-ordered, so that is a prefix of the list.
  const reload = async () => {
    const oldest = jobs.length ? jobs[jobs.length - 1].id : null;
    let items = [];
    let next = null;
    let limit = Math.min(Math.max(jobs.length, PAGE), MAX_PAGE);
    do {
      const page = await api(query(filters, limit, next), { signal: ctx.signal });
      items = items.concat(page.items);
      next = page.next_cursor;
      limit = MAX_PAGE;
    } while (next && oldest && items.length && items[items.length - 1].id > oldest);
    jobs = items;
    cursor = next;
    draw();
    status.textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
  };

  const refresh = () => serially(async () => {
    try {
      await reload();
    } catch (error) {
      ctx.showError(error, "listing jobs");
    }
    if (!ctx.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  });

  more.addEventListener("click", () => serially(async () => {
    if (!cursor) return;
    try {
      const page = await api(query(filters, PAGE, cursor), { signal: ctx.signal });
      const known = new Set(jobs.map((job) => job.id));
      jobs = jobs.concat(page.items.filter((job) => !known.has(job.id)));
      cursor = page.next_cursor;
      draw();
    } catch (error) {
      ctx.showError(error, "listing older jobs");
    }
  }));

  api("/v1/projects", { signal: ctx.signal })
    .then((list) => fill(projects, (list.items || []).map((p) => h("option", { value: p.name }))))
    .catch(() => {}); // only suggestions

  refresh();
  return () => clearTimeout(timer);
}
