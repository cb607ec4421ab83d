// The job's spec as the server resolved it (every default filled): what it trains, its
// hyperparameters, when it stops and how it checkpoints, its shape and reporting.
import { duration, fill, h } from "../dom.js";

function value(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

function stopText(stop) {
  const parts = [];
  if (stop.max_steps) parts.push(`${stop.max_steps} steps`);
  if (stop.epochs) parts.push(`${stop.epochs} epochs`);
  const ends = parts.join(" or ") + (parts.length > 1 ? ", whichever comes first" : "");
  if (!stop.max_runtime_s) return ends;
  const time = duration(stop.max_runtime_s);
  return parts.length ? `${ends}; at most ${time} per attempt (then TIMED_OUT)` : `train for ${time}, then finish`;
}

function checkpointText(checkpoint) {
  const when = checkpoint.every_steps ? `every ${checkpoint.every_steps} steps and at the end` : "at the end only";
  return `${when}, keeping the last ${checkpoint.keep_last}`;
}

function shapeText(resources) {
  const ranks = resources.procs ? `${resources.procs} ranks` : `${resources.nodes} × ${resources.procs_per_node} ranks`;
  return `${ranks} (${resources.accelerator})`;
}

function reportingText(spec) {
  const evaluation = spec.eval_every_steps ? `evaluated every ${spec.eval_every_steps} steps` : "evaluated at the end";
  return `metrics every ${spec.log_every_steps} steps, ${evaluation}`;
}

export function specPanel() {
  const el = h("section", { class: "panel", id: "job-spec" }, h("h2", {}, "Spec"));
  const draw = (spec) => {
    const code = spec.code ? `${spec.code.entrypoint} from ${spec.code.bundle}` : spec.recipe;
    const hyperparameters = Object.entries(spec.hyperparameters || {});
    fill(el,
      h("h2", {}, "Spec"),
      h("dl", { class: "stats spec" },
        [["trains", code, "spec-trains"], ["stop", stopText(spec.stop), "spec-stop"],
          ["checkpoints", checkpointText(spec.checkpoint), "spec-checkpoint"],
          ["shape", shapeText(spec.resources), "spec-shape"], ["reporting", reportingText(spec), "spec-reporting"]]
          .flatMap(([term, text, id]) => [h("dt", {}, term), h("dd", { id }, text)])),
      h("table", { class: "table compact", id: "spec-hyperparameters" },
        h("thead", {}, h("tr", {}, h("th", {}, "hyperparameter"), h("th", {}, "value"))),
        h("tbody", {}, hyperparameters.length
          ? hyperparameters.map(([name, v]) => h("tr", { dataset: { name } },
            h("td", {}, h("code", {}, name)), h("td", { class: "value" }, value(v))))
          : h("tr", {}, h("td", { class: "empty", colspan: 2 }, "none")))));
  };
  return { el, draw };
}
