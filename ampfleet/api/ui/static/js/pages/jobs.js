// Jobs: the list (newest first) with state and project filters; a row opens the job.
import { api } from "../api.js";
import { STATES, TERMINAL, ageOf, fill, h, precisionText, progressBar, stateBadge } from "../dom.js";

const REFRESH_MS = 3000;
const PAGE = 50;
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

function row(job) {
  const open = () => { location.hash = `#/jobs/${job.id}`; };
  const precision = precisionText(job.precision);
  const wire = precisionText(job.allreduce_dtype);
  return h(
    "tr",
    { class: "clickable", dataset: { job: job.id, state: job.state }, tabindex: 0, onclick: open,
      onkeydown: (e) => { if (e.key === "Enter") open(); } },
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
  );
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
  let cursor = null;
  let timer = null;

  const draw = () => {
    if (!jobs.length) {
      fill(tbody, h("tr", {}, h("td", { colspan: 7, class: "muted empty" }, "No jobs match.")));
    } else {
      fill(tbody, jobs.map(row));
    }
    more.hidden = !cursor;
  };

  const refresh = async () => {
    try {
      const limit = Math.min(Math.max(jobs.length, PAGE), 200);
      const page = await api(query(filters, limit), { signal: ctx.signal });
      jobs = page.items;
      cursor = page.next_cursor;
      draw();
      status.textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
    } catch (error) {
      ctx.showError(error, "listing jobs");
    }
    if (!ctx.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  };

  more.addEventListener("click", async () => {
    try {
      const page = await api(query(filters, PAGE, cursor), { signal: ctx.signal });
      jobs = jobs.concat(page.items);
      cursor = page.next_cursor;
      draw();
    } catch (error) {
      ctx.showError(error, "listing older jobs");
    }
  });

  api("/v1/projects", { signal: ctx.signal })
    .then((list) => fill(projects, (list.items || []).map((p) => h("option", { value: p.name }))))
    .catch(() => {}); // only suggestions

  refresh();
  return () => clearTimeout(timer);
}
