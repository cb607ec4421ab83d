// What a job produced (model, manifest, checkpoints, recipe outputs) with a download button
// each, and the model's manifest: how the weights came to be (precision and AllReduce dtype,
// requested and effective, every fallback) and the final metrics.
//
// A download is a fetch() with the key in the Authorization header, saved from a Blob: a
// plain link would need the key in its URL, and a URL lands in history, logs and Referer.
// The Blob holds the whole file in the tab, which suits the model and the manifest; the CLI
// and the SDK stream big checkpoints to disk and resume them. Where the browser offers
// SubtleCrypto (https, or the local machine) the bytes are checked against the listed sha256
// before they are saved.
import { ApiError, api, fetchBlob } from "../api.js";
import { ageOf, bytes, fill, h, num, singleFlight, syncRows } from "../dom.js";

const MANIFEST = "manifest.json";
const SHA_SHOWN = 12; // hex digits in the table; the full digest is in the title
const REVOKE_AFTER_MS = 30_000; // the browser has taken the Blob over by then

function artifactPath(jobId, name) {
  const segments = name.split("/").map(encodeURIComponent).join("/");
  return `/v1/jobs/${encodeURIComponent(jobId)}/artifacts/${segments}`;
}

function fileName(artifact) {
  const last = artifact.name.split("/").pop();
  return artifact.kind === "checkpoint" ? `${last}.tar` : last; // one tar of its files
}

async function sha256Hex(blob) {
  if (!globalThis.crypto?.subtle) return null; // only in secure contexts
  const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), REVOKE_AFTER_MS);
}

function lineageText(setting) {
  if (!setting) return "—";
  return setting.effective === setting.requested
    ? setting.effective
    : `${setting.effective} (requested ${setting.requested})`;
}

function fallbackItems(what, fallbacks) {
  return (fallbacks || []).map((f) =>
    h("li", { class: "fallback", dataset: { what } }, h("strong", {}, what), ` attempt ${f.attempt}: ${f.message}`));
}

function manifestView(manifest) {
  const versions = manifest.versions || {};
  const fallbacks = [
    ...fallbackItems("precision", manifest.precision?.fallbacks),
    ...fallbackItems("AllReduce", manifest.allreduce_dtype?.fallbacks),
  ];
  // The final evaluation's metrics first, then those of the last logged step.
  const validationFirst = (name) => `${name.startsWith("val_") ? 0 : 1}${name}`;
  const metrics = Object.entries(manifest.metrics || {})
    .sort(([a], [b]) => validationFirst(a).localeCompare(validationFirst(b)));
  return [
    h("dl", { class: "summary", id: "manifest-summary" },
      [["recipe", manifest.recipe], ["checkpoint step", String(manifest.checkpoint?.step ?? "—")],
        ["ranks", `${manifest.world_size} (${manifest.backend})`],
        ["exported", `${ageOf(manifest.created_at)} ago`],
        ["versions", Object.entries(versions).map(([k, v]) => `${k} ${v}`).join(", ")]]
        .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      h("dt", {}, "precision"), h("dd", { id: "manifest-precision" }, lineageText(manifest.precision)),
      h("dt", {}, "AllReduce dtype"), h("dd", { id: "manifest-allreduce" }, lineageText(manifest.allreduce_dtype))),
    h("ul", { id: "manifest-fallbacks", class: "fallbacks" },
      fallbacks.length ? fallbacks : h("li", { class: "muted" }, "No fallback: the run used what it started with.")),
    h("table", { class: "table", id: "manifest-metrics" },
      h("thead", {}, h("tr", {}, h("th", {}, "Final metric"), h("th", {}, "Value"))),
      h("tbody", {}, metrics.map(([name, value]) =>
        h("tr", { dataset: { metric: name } }, h("td", {}, name),
          h("td", { class: "value", dataset: { value: String(value) }, title: String(value) }, num(value)))))),
  ];
}

/**
 * Downloads one listed artifact of job `jobId` (`{name, sha256, kind?}`) into the browser:
 * `button` is disabled meanwhile, `status` tells the progress, and `row` gets
 * data-downloaded = verified | unverified once saved.
 */
export async function downloadArtifact(ctx, jobId, artifact, { button, status, row }) {
  button.disabled = true;
  status.textContent = "starting…";
  try {
    const blob = await fetchBlob(artifactPath(jobId, artifact.name), {
      signal: ctx.signal,
      onProgress: (received, total) => {
        status.textContent = total ? `${bytes(received)} of ${bytes(total)}` : bytes(received);
      },
    });
    const digest = await sha256Hex(blob);
    if (digest !== null && digest !== artifact.sha256) {
      throw new ApiError(0, "download_corrupted",
        `the bytes' sha256 ${digest.slice(0, SHA_SHOWN)}… is not the listed ${artifact.sha256.slice(0, SHA_SHOWN)}…`);
    }
    saveBlob(blob, fileName(artifact));
    status.textContent = digest ? "saved, sha256 verified" : "saved";
    row.dataset.downloaded = digest ? "verified" : "unverified";
  } catch (error) {
    status.textContent = "failed";
    ctx.showError(error, `downloading ${artifact.name}`);
  } finally {
    button.disabled = false;
  }
}

/** The artifacts and manifest panels of job `jobId`; `load()` (re)reads the listing. */
export function artifactsPanel(ctx, jobId) {
  const rows = new Map(); // artifact name -> its row
  const body = h("tbody", {});
  const count = h("span", { id: "artifacts-count", class: "muted small" });
  const reload = h("button", { type: "button", id: "artifacts-reload", class: "secondary" }, "Reload");
  const manifestBox = h("div", { id: "manifest" },
    h("p", { class: "muted" }, "No model yet: a job that SUCCEEDS exports one."));
  let manifestShown = false;

  const create = (artifact) => {
    const status = h("span", { class: "download-status muted small", role: "status" });
    const button = h("button", { type: "button", class: "download secondary" }, "Download");
    const row = h("tr", { dataset: { artifact: artifact.name, kind: artifact.kind } },
      h("td", { class: "name" }, h("code", {}, artifact.name)),
      h("td", { class: "kind" }, artifact.kind),
      h("td", { class: "size", title: `${artifact.size} bytes` }, bytes(artifact.size)),
      h("td", { class: "sha256", title: artifact.sha256 }, h("code", {}, artifact.sha256.slice(0, SHA_SHOWN))),
      h("td", { class: "step" }, artifact.step === null ? "—" : String(artifact.step)),
      h("td", { class: "download-cell" }, button, " ", status));
    button.addEventListener("click", () => downloadArtifact(ctx, jobId, artifact, { button, status, row }));
    return row;
  };

  const showManifest = async () => {
    try {
      const manifest = await api(artifactPath(jobId, MANIFEST), { signal: ctx.signal });
      fill(manifestBox, manifestView(manifest));
      manifestShown = true;
    } catch (error) {
      ctx.showError(error, "loading the model's manifest");
    }
  };

  const load = singleFlight(() => api(`/v1/jobs/${encodeURIComponent(jobId)}/artifacts`, { signal: ctx.signal })
    .then(async ({ items }) => {
      // Rows are immutable once listed (a name is written once), so a reload only adds.
      syncRows(body, rows, items, { key: (a) => a.name, create, update: () => {} });
      if (!items.length) body.append(h("tr", {}, h("td", { class: "empty", colspan: 6 }, "Nothing stored yet.")));
      count.textContent = `${items.length} stored`;
      if (!manifestShown && items.some((a) => a.name === MANIFEST)) await showManifest();
    })
    .catch((error) => ctx.showError(error, "listing the job's artifacts")), ctx.signal);
  reload.addEventListener("click", load);

  const el = [
    h("section", { class: "panel wide", id: "artifacts" },
      h("div", { class: "panel-head" }, h("h2", {}, "Artifacts"), count, reload),
      h("table", { class: "table", id: "artifacts-table" },
        h("thead", {}, h("tr", {}, ["Name", "Kind", "Size", "sha256", "Step", ""].map((t) => h("th", {}, t)))),
        body)),
    h("section", { class: "panel wide", id: "manifest-panel" }, h("h2", {}, "Model manifest"), manifestBox),
  ];
  return { el, load };
}
