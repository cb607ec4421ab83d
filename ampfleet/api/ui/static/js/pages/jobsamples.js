// What a fine-tuned language model generated at each evaluation (GET /v1/jobs/{id}/samples):
// the latest evaluation's prompts and completions, with a choice of the earlier ones. The
// panel stays hidden for a job that makes no samples. It is read again when an evaluation's
// metrics arrive (its samples are listed about then) and when the job changes state.
import { api } from "../api.js";
import { fill, h, singleFlight } from "../dom.js";

const SHOWN = 20; // the latest evaluations offered

/** The samples panel of job `jobId`; `load()` (re)reads them. */
export function samplesPanel(ctx, jobId) {
  const choice = h("select", { id: "samples-step", "aria-label": "Evaluation step" });
  const text = h("pre", { id: "samples-text", class: "samples" });
  const note = h("p", { id: "samples-note", class: "muted small" });
  const el = h("section", { class: "panel wide", id: "samples", hidden: true },
    h("div", { class: "panel-head" }, h("h2", {}, "Samples"), choice), note, text);
  let items = [];

  const show = (step) => {
    const sample = items.find((s) => String(s.step) === String(step));
    if (!sample) return;
    text.textContent = sample.text;
    text.dataset.step = String(sample.step);
    note.textContent = `Generated greedily at the evaluation of step ${sample.step}`
      + (sample.truncated ? " (cut short: the artifact holds all of it)." : ".");
  };
  choice.addEventListener("change", () => show(choice.value));

  const load = singleFlight(() => api(`/v1/jobs/${encodeURIComponent(jobId)}/samples?limit=${SHOWN}`, { signal: ctx.signal })
    .then(({ items: fresh }) => {
      if (!fresh.length) return;
      const latestShown = !items.length || choice.value === String(items[items.length - 1].step);
      items = fresh;
      const kept = choice.value;
      fill(choice, [...items].reverse().map((s) => h("option", { value: String(s.step) }, `step ${s.step}`)));
      choice.value = latestShown ? String(items[items.length - 1].step) : kept;
      show(choice.value);
      el.hidden = false;
    })
    .catch((error) => ctx.showError(error, "loading the job's samples")), ctx.signal);
  return { el, load };
}
