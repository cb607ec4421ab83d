// Login: the API key is checked against the API, then kept for this tab only.
import { api, credentials } from "../api.js";
import { h } from "../dom.js";

export function loginPage(ctx, onLoggedIn) {
  const input = h("input", {
    id: "api-key", name: "key", type: "password", autocomplete: "off", required: true,
    spellcheck: "false", placeholder: "amp_…",
  });
  const button = h("button", { type: "submit", id: "login-submit" }, "Log in");
  const form = h(
    "form",
    { id: "login-form", class: "panel login" },
    h("h1", {}, "Log in"),
    h("label", { for: "api-key" }, "API key"),
    input,
    button,
    h("p", { class: "muted" },
      "Any ampfleet API key. The key is sent as ",
      h("code", {}, "Authorization: Bearer"),
      " on each request and kept in this tab's session storage only."),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    button.disabled = true;
    try {
      await api("/v1/nodes", { key, signal: ctx.signal });
      credentials.set(key);
      ctx.clearError();
      onLoggedIn();
    } catch (error) {
      ctx.showError(error, "login refused");
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  ctx.view.append(form);
  input.focus();
}
