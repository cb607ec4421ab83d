// The job's spec as the server resolved it (every default filled): what it trains, its
// hyperparameters, when it stops and how it checkpoints, its shape and reporting.
import { commandText, duration, fill, h } from "../dom.js";

function value(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

// A script (code.command) decides its own end: max_steps is only the total it is told.
function scriptStopText(stop) {
  const ends = stop.max_steps ? `${stop.max_steps} steps (the script's AMPFLEET_MAX_STEPS)` : "when the script exits";
  return stop.max_runtime_s ? `${ends}; at most ${duration(stop.max_runtime_s)} per attempt (then TIMED_OUT)` : ends;
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
  if (spec.code?.command) return "from the script's printed step lines, or its ampfleet.train session";
  const evaluation = spec.eval_every_steps ? `evaluated every ${spec.eval_every_steps} steps` : "evaluated at the end";
  return `metrics every ${spec.log_every_steps} steps, ${evaluation}`;
}

export function specPanel() {
  const el = h("section", { class: "panel", id: "job-spec" }, h("h2", {}, "Spec"));
  const draw = (spec) => {
    const script = Boolean(spec.code?.command);
    const code = !spec.code ? spec.recipe
      : `${script ? commandText(spec.code.command) : spec.code.entrypoint} from ${spec.code.bundle}`;
    const hyperparameters = Object.entries(spec.hyperparameters || {});
    fill(el,
      h("h2", {}, "Spec"),
      h("dl", { class: "stats spec" },
        [["trains", code, "spec-trains"], ["stop", script ? scriptStopText(spec.stop) : stopText(spec.stop), "spec-stop"],
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
