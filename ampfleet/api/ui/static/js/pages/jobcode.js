// What a job brought with it: its code bundle (a recipe's entrypoint or a script's command,
// sha256, requirements, the files as unpacked on the nodes) and its inputs (each dataset
// version, shared folder or earlier job's model, by the name the recipe reads it under).
// Shown only for jobs that have either.
import { api } from "../api.js";
import { bytes, commandText, fill, h } from "../dom.js";

const FILES_SHOWN = 200;

function inputSource(item) {
  if (item.path) return h("code", {}, `file://${item.path}`);
  if (item.job) {
    return h("span", {}, "the model of ", h("a", { href: `#/jobs/${encodeURIComponent(item.job)}` }, item.job),
      ` (${item.files.length} files, digest ${item.sha256.slice(0, 12)})`);
  }
  return h("span", {}, h("code", {}, `${item.name}@${item.version}`), ` (${item.dataset}, sha256 ${item.sha256.slice(0, 12)})`);
}

function inputRows(inputs) {
  return Object.entries(inputs).map(([name, item]) =>
    h("tr", { dataset: { input: name } }, h("td", {}, h("code", {}, name)), h("td", {}, inputSource(item))));
}

function fileTable(files) {
  const shown = files.slice(0, FILES_SHOWN);
  const more = files.length - shown.length;
  return h("table", { class: "table compact", id: "code-files" },
    h("thead", {}, h("tr", {}, h("th", {}, "file"), h("th", {}, "size"))),
    h("tbody", {},
      shown.map((f) => h("tr", { dataset: { path: f.path } },
        h("td", {}, h("code", {}, f.path), f.kind === "symlink" ? " (link)" : ""),
        h("td", { class: "value" }, f.kind === "file" ? bytes(f.size) : ""))),
      more > 0 ? h("tr", {}, h("td", { class: "empty", colspan: 2 }, `and ${more} more`)) : []));
}

export function codePanel(ctx) {
  const el = h("section", { class: "panel", id: "job-code", hidden: true }, h("h2", {}, "Code and inputs"));
  const draw = async (spec) => {
    const inputs = spec.inputs || {};
    if (!spec.code && Object.keys(inputs).length === 0) return;
    el.hidden = false;
    const parts = [h("h2", {}, "Code and inputs")];
    if (spec.code) {
      const code = spec.code;
      const requirements = code.requirements && code.requirements.length ? code.requirements.join(", ") : "none";
      parts.push(h("dl", { class: "stats spec" },
        code.command
          ? [h("dt", {}, "command"), h("dd", { id: "code-command" }, h("code", {}, commandText(code.command)))]
          : [h("dt", {}, "entrypoint"), h("dd", { id: "code-entrypoint" }, h("code", {}, code.entrypoint))],
        h("dt", {}, "bundle"), h("dd", { id: "code-bundle" }, code.bundle),
        h("dt", {}, "sha256"), h("dd", { id: "code-sha256" }, h("code", {}, code.sha256)),
        h("dt", {}, "requirements"), h("dd", { id: "code-requirements" }, requirements)));
      const files = h("div", { id: "code-files-holder" }, h("p", { class: "muted" }, "Loading the file list…"));
      parts.push(files);
      api(`/v1/bundles/${code.bundle}`, { signal: ctx.signal })
        .then((bundle) => fill(files, fileTable(bundle.files)))
        .catch((error) => {
          if (error.name !== "AbortError") fill(files, h("p", { class: "muted" }, "The bundle is no longer stored."));
        });
    }
    if (Object.keys(inputs).length) {
      parts.push(h("table", { class: "table compact", id: "code-inputs" },
        h("thead", {}, h("tr", {}, h("th", {}, "input"), h("th", {}, "source"))),
        h("tbody", {}, inputRows(inputs))));
    }
    fill(el, ...parts);
  };
  return { el, draw };
}
