// The page's chrome around the chat: the demo banner, the sidebar foot (model, budget,
// the signed-in user and Sign out) and the settings panel (model, budget, mode).

import { el } from "./dom.js";
import { fmtK } from "./format.js";

const BANNER_KEY = "ctxstack.demo-banner";

function windowText(budget) {
  if (!budget) return "";
  return `${fmtK(budget.context_size).replace(".0k", "K")} context window `
    + `(${fmtK(budget.usable_input_tokens)} for the conversation, ${fmtK(budget.max_output_tokens)} kept for the answer)`;
}

function sourceText(budget) {
  const where = new Set(Object.values(budget?.sources || {}));
  if (where.has("demo")) return "declared by the demo model";
  if (where.has("db")) return "set by an admin";
  if ([...where].some((w) => String(w).includes("env:"))) return "from the environment";
  return "library defaults";
}

function banner(info) {
  const box = document.getElementById("demo-banner");
  if (!info.demo_model || sessionStorage.getItem(BANNER_KEY) === "closed") {
    box.hidden = true;
    return;
  }
  box.replaceChildren();
  const close = el("button", "btn btn-icon btn-small banner-close", "×");
  close.type = "button";
  close.setAttribute("aria-label", "Hide this notice");
  close.addEventListener("click", () => {
    box.hidden = true;
    sessionStorage.setItem(BANNER_KEY, "closed");
  });
  box.append(close, el("strong", "", "Demo model. "),
    document.createTextNode("Answers come from ctxstack's built-in offline demo model, not a real LLM. "));
  if (info.budget) {
    box.append(document.createTextNode(`It declares a small ${windowText(info.budget)}, so after a few turns `
      + "the older ones are summarised: a dashed divider shows where — click it to see what the model remembers. "));
  }
  box.append(document.createTextNode("To use a real endpoint, set "));
  ["LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL"].forEach((name, i) => {
    if (i) box.append(document.createTextNode(i === 2 ? " and " : ", "));
    box.append(el("code", "", name));
  });
  box.append(document.createTextNode(" in the server's environment and restart "),
    el("code", "", "ctxstack serve"), document.createTextNode("."));
  box.hidden = false;
}

/** The banner, the sidebar's model line and the settings panel's model and budget. */
export function renderInfo(info) {
  banner(info);
  const model = document.getElementById("sidebar-model");
  const budget = info.budget;
  model.textContent = `Model: ${info.model || "unknown"}${info.demo_model ? " (demo)" : ""}`
    + (budget ? ` · ${fmtK(budget.context_size).replace(".0k", "K")} window, ${fmtK(budget.usable_input_tokens)} for context` : "");
  const rows = document.getElementById("settings-facts");
  rows.replaceChildren();
  const facts = [
    ["Model", `${info.model || "unknown"}${info.demo_model ? " — the offline demo model" : ""}`],
    ["Context window", budget ? `${budget.context_size.toLocaleString("en")} tokens (${sourceText(budget)})` : "unknown"],
    ["Kept for the answer", budget ? `${budget.max_output_tokens.toLocaleString("en")} tokens` : "unknown"],
    ["Budget for the context", budget ? `${budget.usable_input_tokens.toLocaleString("en")} tokens: history beyond it is summarised` : "unknown"],
    ["Server", `ctxstack ${info.version}${info.auth_required ? " · sign-in required" : " · no sign-in (local)"}`],
  ];
  for (const [name, value] of facts) rows.append(el("dt", "", name), el("dd", "", value));
}

/** The sidebar's account line: who is signed in, and Sign out (when tokens are used). */
export function renderAccount(state, signOut) {
  const box = document.getElementById("sidebar-user");
  box.replaceChildren();
  if (!state.me) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  const name = el("span", "user-name", state.me.name);
  if (state.info?.auth_required) {
    box.append(document.createTextNode("Signed in as "), name);
    const out = el("button", "btn btn-small sign-out", "Sign out");
    out.type = "button";
    out.addEventListener("click", signOut);
    box.append(out);
  } else {
    box.append(document.createTextNode("Local user "), name, el("span", "muted", " · no sign-in needed"));
  }
}

/** Keep the topbar's mode switch and the settings panel's in step. */
export function syncModeInputs(value) {
  for (const input of document.querySelectorAll('input[name="mode"], input[name="settings-mode"]')) {
    input.checked = input.value === value;
  }
}
