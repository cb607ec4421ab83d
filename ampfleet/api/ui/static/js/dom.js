// DOM building and formatting. API data only ever becomes text nodes or attribute values.

/**
 * h("div", {class: "x", dataset: {id: 1}, onclick: fn}, "text", child) -> an element.
 * Props: class, text, dataset, on<event>, and anything else as an attribute
 * (true -> present, false/null/undefined -> absent).
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "value") el.value = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace every child of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"]);
export const STATES = [
  "QUEUED", "SCHEDULED", "STARTING", "RUNNING", "CANCELLING", "RESTARTING", "PREEMPTED",
  "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT",
];

export function stateBadge(state, props = {}) {
  return h("span", { ...props, class: `badge state-${String(state).toLowerCase()}` }, state);
}

export function progressBar(step, total) {
  const el = h(
    "span",
    { class: "progress", role: "progressbar", "aria-valuemin": 0 },
    h("span", { class: "bar" }, h("span", { class: "bar-fill" })),
    h("span", { class: "progress-label" }),
  );
  return setProgress(el, step, total);
}

/** Moves a bar made by progressBar() to `step` of `total`, in place. */
export function setProgress(el, step, total) {
  const fraction = total ? Math.min(Math.max(step / total, 0), 1) : 0;
  el.querySelector(".bar-fill").style.width = `${(fraction * 100).toFixed(1)}%`;
  el.setAttribute("aria-valuemax", String(total ?? 0));
  el.setAttribute("aria-valuenow", String(step));
  el.querySelector(".progress-label").textContent = total ? `${step} / ${total}` : `${step} / ?`;
  return el;
}

/**
 * Makes `parent`'s children the rows of `items`, in order, keeping the element of every item
 * already shown (found by `key`) and passing it to `update`; `create` makes the new ones.
 * Rows stay put instead of being rebuilt, so focus, selection and scroll survive a refresh.
 * `rows` (key -> element) is the caller's, kept across calls.
 */
export function syncRows(parent, rows, items, { key, create, update }) {
  const wanted = new Set(items.map(key));
  for (const [id, el] of rows) {
    if (!wanted.has(id)) {
      el.remove();
      rows.delete(id);
    }
  }
  let next = parent.firstChild;
  for (const item of items) {
    let el = rows.get(key(item));
    if (el) update(el, item);
    else rows.set(key(item), (el = create(item)));
    if (el === next) next = next.nextSibling;
    else parent.insertBefore(el, next);
  }
  while (next) {
    const stray = next; // what is not a row of ours: the "nothing here" placeholder
    next = next.nextSibling;
    stray.remove();
  }
}

/** 75 -> "1m 15s"; 90061 -> "1d 1h". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function ageOf(isoTime, now = Date.now()) {
  return isoTime ? duration((now - Date.parse(isoTime)) / 1000) : "—";
}

export function clockTime(isoTime) {
  return isoTime ? new Date(isoTime).toLocaleTimeString([], { hour12: false }) : "—";
}

export function bytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(value < 10 ? 2 : 1) : value.toFixed(0)} ${units[unit]}`;
}

/** Numbers for axes and stat boxes: 3 significant digits, exponent when tiny or huge. */
export function num(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "—";
  const abs = Math.abs(value);
  if (abs === 0) return "0";
  if (abs >= 1e6 || abs < 1e-3) return value.toExponential(2);
  if (abs >= 1000) return value.toFixed(0);
  return String(Number(value.toPrecision(3)));
}

export function precisionText(setting) {
  if (!setting) return "—";
  return setting.effective || setting.requested;
}

/** A script job's command (`code.command`) as a shell would read it: an argument with a
 * space or a quote in it is quoted. */
export function commandText(command) {
  return command.map((arg) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", "'\"'\"'")}'`)).join(" ");
}

/**
 * `run` (returns a promise) one at a time: called while a run is in flight, it runs once
 * more after that one (a state change mid-load is not lost), unless `signal` was aborted.
 */
export function singleFlight(run, signal) {
  let running = null;
  let again = false;
  const call = () => {
    if (running) {
      again = true;
      return;
    }
    running = run().finally(() => {
      running = null;
      if (again && !signal.aborted) {
        again = false;
        call();
      }
    });
  };
  return call;
}
