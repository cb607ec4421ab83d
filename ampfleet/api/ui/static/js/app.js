// The console shell: login, the error banner, and a hash router over the pages.
import { ApiError, credentials, setUnauthorizedHandler } from "./api.js";
import { fill, h } from "./dom.js";
import { fleetPage } from "./pages/fleet.js";
import { jobPage } from "./pages/job.js";
import { jobsPage } from "./pages/jobs.js";
import { loginPage, openSession } from "./pages/login.js";
import { sweepPage } from "./pages/sweep.js";
import { sweepsPage } from "./pages/sweeps.js";

const view = document.getElementById("view");
const banner = document.getElementById("error");
const nav = document.getElementById("nav");
const logout = document.getElementById("logout");
const whoami = document.getElementById("whoami");

/** Shows an error readably: the envelope's code and message, and each offending field. */
export function showError(error, context = "") {
  if (error && error.name === "AbortError") return;
  const api = error instanceof ApiError;
  const code = api ? error.code : "error";
  const message = error && error.message ? error.message : String(error);
  const details = api ? error.details : [];
  fill(
    banner,
    h("button", { type: "button", class: "dismiss", "aria-label": "Dismiss", onclick: clearError }, "×"),
    h("strong", { class: "error-code" }, code),
    api && error.status ? h("span", { class: "muted" }, ` (HTTP ${error.status})`) : null,
    ": ",
    context ? `${context}: ` : "",
    h("span", { class: "error-message" }, message),
    details.length
      ? h("ul", { class: "error-details" }, details.map((d) =>
          h("li", {}, d.field ? h("code", {}, d.field) : null, d.field ? ": " : "", d.message || "")))
      : null,
  );
  banner.hidden = false;
}

export function clearError() {
  banner.hidden = true;
  banner.replaceChildren();
}

const routes = [
  [/^#\/jobs\/([A-Za-z0-9_-]+)$/, (ctx, m) => jobPage(ctx, m[1])],
  [/^#\/jobs(?:\?(.*))?$/, (ctx, m) => jobsPage(ctx, new URLSearchParams(m[1] || ""))],
  [/^#\/sweeps\/([A-Za-z0-9_-]+)$/, (ctx, m) => sweepPage(ctx, m[1])],
  [/^#\/sweeps$/, (ctx) => sweepsPage(ctx)],
  [/^#\/fleet$/, (ctx) => fleetPage(ctx)],
];

let current = null; // {controller, cleanup}

function render() {
  if (current) {
    current.controller.abort();
    if (current.cleanup) current.cleanup();
    current = null;
  }
  clearError();
  const controller = new AbortController();
  const ctx = { view, signal: controller.signal, showError, clearError };
  current = { controller, cleanup: null };
  const key = credentials.get();
  nav.hidden = !key;
  logout.hidden = !key;
  whoami.textContent = key ? credentials.who() || `key ${key.slice(0, 8)}…` : "";
  if (!key) {
    fill(view);
    loginPage(ctx, () => {
      if (!/^#\/(jobs|sweeps|fleet)/.test(location.hash)) location.hash = "#/jobs";
      else render();
    });
    return;
  }
  const hash = location.hash || "#/jobs";
  for (const [pattern, page] of routes) {
    const match = pattern.exec(hash);
    if (match) {
      for (const link of nav.querySelectorAll("a")) {
        link.classList.toggle("active", hash.startsWith(`#/${link.dataset.nav}`));
      }
      fill(view);
      current.cleanup = page(ctx, match) || null;
      return;
    }
  }
  location.hash = "#/jobs";
}

setUnauthorizedHandler((error) => {
  credentials.clear();
  render();
  showError(error, "logged out");
});

logout.addEventListener("click", () => {
  credentials.clear();
  render();
});

// `ampfleet ui` opens #login=<token>. The token leaves the address bar and this history
// entry before anything else happens, then is traded for a session.
async function start() {
  const link = /^#login=(.*)$/.exec(location.hash);
  if (link) {
    history.replaceState(null, "", `${location.pathname}${location.search}#/jobs`);
    try {
      await openSession(link[1]);
    } catch (error) {
      render();
      showError(error, "the login link was refused");
      return;
    }
  }
  render();
}

window.addEventListener("hashchange", render);
start();
