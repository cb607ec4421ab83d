// The API client: the key from the login form (or a login link's session), the error
// envelope, and SSE over fetch().
import { SseParser } from "./sse.js";

const KEY_NAME = "ampfleet.apiKey";
const WHO_NAME = "ampfleet.who";

/** What every request presents (a typed key, or a console session from a login link) and
 * how the top bar names it; both for this tab only. */
export const credentials = {
  get: () => sessionStorage.getItem(KEY_NAME),
  who: () => sessionStorage.getItem(WHO_NAME),
  set: (key, who = `key ${key.slice(0, 8)}…`) => {
    sessionStorage.setItem(KEY_NAME, key);
    sessionStorage.setItem(WHO_NAME, who);
  },
  clear: () => {
    sessionStorage.removeItem(KEY_NAME);
    sessionStorage.removeItem(WHO_NAME);
  },
};

/** An API error, from the envelope {"error": {"code", "message", "details"}}. */
export class ApiError extends Error {
  constructor(status, code, message, details = []) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

let onUnauthorized = () => {};

/** Called with the ApiError whenever the API answers 401 (a revoked or wrong key). */
export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

// The API lives one level above the console (/ui/ -> /), wherever the app is mounted.
function apiUrl(path) {
  return new URL(`..${path}`, document.baseURI).toString();
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: a proxy's error page, say
  }
  const error = body && typeof body.error === "object" ? body.error : null;
  if (error) {
    return new ApiError(
      response.status,
      String(error.code || "error"),
      String(error.message || response.statusText),
      Array.isArray(error.details) ? error.details : [],
    );
  }
  return new ApiError(response.status, `http_${response.status}`, `${response.status} ${response.statusText}`.trim());
}

function headers(key, extra = {}) {
  const result = { ...extra };
  const presented = key ?? credentials.get();
  if (presented) result.Authorization = `Bearer ${presented}`;
  return result;
}

/** fetch() a JSON API route; throws ApiError (network failures too, as code network_error). */
export async function api(path, { method = "GET", body, signal, key } = {}) {
  const extra = { Accept: "application/json" };
  if (body !== undefined) extra["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(apiUrl(path), {
      method,
      headers: headers(key, extra),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network_error", `cannot reach the API (${err.message})`);
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401 && key === undefined) onUnauthorized(error);
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

/**
 * GETs a route's bytes as a Blob, with the key in the Authorization header (a link cannot
 * send one, and a key in a URL ends up in history and logs). onProgress(received, total)
 * hears each chunk; total is the Content-Length. Throws ApiError like api().
 */
export async function fetchBlob(path, { signal, onProgress = () => {} } = {}) {
  let response;
  try {
    response = await fetch(apiUrl(path), { headers: headers(undefined), signal, cache: "no-store" });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network_error", `cannot reach the API (${err.message})`);
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401) onUnauthorized(error);
    throw error;
  }
  const total = Number(response.headers.get("Content-Length")) || null;
  const type = response.headers.get("Content-Type") || "application/octet-stream";
  const chunks = [];
  let received = 0;
  try {
    const reader = response.body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      received += value.byteLength;
      onProgress(received, total);
    }
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network_error", `the download broke off after ${received} bytes (${err.message})`);
  }
  if (total !== null && received !== total) {
    throw new ApiError(0, "download_incomplete", `received ${received} of ${total} bytes`);
  }
  return new Blob(chunks, { type });
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });

/**
 * Follows an SSE route with fetch() (EventSource cannot send the Authorization header).
 * Reconnects after a dropped connection with Last-Event-ID, so nothing is lost or repeated;
 * stops at the `end` frame, at a client error (4xx other than 429), or when `signal` aborts.
 *
 * onFrame(event, data) gets each frame, its data parsed as JSON.
 * onStatus(status, error) hears "connecting", "live", "reconnecting", "ended", "failed".
 */
export async function follow(path, { onFrame, onStatus = () => {}, signal, lastEventId = null, retryMs = 1500 }) {
  let last = lastEventId;
  let ended = false;
  while (!signal.aborted && !ended) {
    onStatus("connecting");
    try {
      const extra = { Accept: "text/event-stream" };
      if (last !== null) extra["Last-Event-ID"] = last;
      const response = await fetch(apiUrl(path), { headers: headers(undefined, extra), signal, cache: "no-store" });
      if (!response.ok) {
        const error = await errorOf(response);
        if (response.status >= 400 && response.status < 500 && response.status !== 429) {
          if (response.status === 401) onUnauthorized(error);
          onStatus("failed", error);
          return;
        }
        throw error;
      }
      onStatus("live");
      const parser = new SseParser((frame) => {
        if (frame.id !== null) last = frame.id;
        let data = frame.data;
        try {
          data = JSON.parse(frame.data);
        } catch {
          // leave it as text
        }
        onFrame(frame.event, data);
        if (frame.event === "end") {
          ended = true;
          onStatus("ended");
        }
      });
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
      }
    } catch (err) {
      if (signal.aborted || err.name === "AbortError") return;
      onStatus("reconnecting", err);
    }
    if (!ended && !signal.aborted) await sleep(retryMs, signal);
  }
}
