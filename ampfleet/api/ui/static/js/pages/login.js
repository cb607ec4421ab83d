// Login: the API key is checked against the API, then kept for this tab only. A login link
// (`ampfleet ui`) is traded for a console session instead, kept the same way.
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
    h("p", { class: "muted" },
      "Or run ", h("code", {}, "ampfleet ui"),
      " where your key is configured: it opens the console logged in, with a link that works once."),
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

/** Trades a login link's one-time token for a console session: the key that asked for the
 * link never reaches the browser. Throws ApiError (login_token_expired, _used, _invalid). */
export async function openSession(token, signal) {
  const opened = await api("/v1/console-sessions", { method: "POST", body: { token }, key: "", signal });
  credentials.set(opened.session, `${opened.role} key of ${opened.project} (console session)`);
}
