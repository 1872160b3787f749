// The context meter: how full the context was at the last model call, like a fuel gauge.
// One bar (a segment per part: system prompt, summary, history, tool outputs, question)
// against the budget, the total as text, and the per-part details on hover or tap.

import { el } from "./dom.js";
import { fmtK, meterLabel, meterRows } from "./format.js";

/** The meter's details as plain text (the hover title and the screen-reader label). */
export function meterText(data) {
  const rows = meterRows(data).map((r) => `${r.label}: ${r.tokens.toLocaleString("en")} tokens`);
  const when = data?.at === "load" ? "before the first model call" : `at model call ${data?.model_calls ?? ""}`;
  return [`Context ${meterLabel(data)} ${when}`, ...rows,
    `Window: ${Number(data?.context_size || 0).toLocaleString("en")} tokens (the rest is kept for the answer)`].join("\n");
}

/**
 * A meter element for a `context` payload. `label` prefixes the total ("Context").
 * Tapping the bar toggles the details; hovering shows them on devices that hover.
 */
export function renderMeter(data, { label = "Context" } = {}) {
  const root = el("div", "meter");
  root.dataset.used = String(data?.used ?? 0);
  root.dataset.budget = String(data?.budget ?? 0);
  const used = Number(data?.used || 0);
  const budget = Number(data?.budget || 0);
  if (budget && used > budget * 0.9) root.classList.add("full");
  const toggle = el("button", "meter-toggle");
  toggle.type = "button";
  toggle.title = meterText(data);
  toggle.setAttribute("aria-expanded", "false");
  toggle.setAttribute("aria-label", meterText(data));
  const bar = el("span", "meter-bar");
  bar.setAttribute("role", "meter");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", String(budget));
  bar.setAttribute("aria-valuenow", String(used));
  for (const row of meterRows(data)) {
    if (!row.tokens) continue;
    const seg = el("span", `meter-seg part-${row.part}`);
    seg.style.width = `${Math.min(100, row.share * 100).toFixed(2)}%`;
    bar.append(seg);
  }
  toggle.append(el("span", "meter-label", label), bar, el("span", "meter-total", meterLabel(data)));
  const detail = el("div", "meter-detail");
  const table = el("table");
  for (const row of meterRows(data)) {
    const tr = el("tr");
    const name = el("td");
    name.append(el("span", `meter-dot part-${row.part}`), document.createTextNode(row.label));
    tr.append(name, el("td", "num", fmtK(row.tokens)), el("td", "num", `${Math.round(row.share * 100)}%`));
    table.append(tr);
  }
  const total = el("tr", "total");
  total.append(el("td", "", "Used of the budget"), el("td", "num", fmtK(used)), el("td", "num", fmtK(budget)));
  table.append(total);
  detail.append(table, el("p", "meter-note", data?.at === "load"
    ? "Estimated before the first model call."
    : `Measured at model call ${data?.model_calls ?? "?"} of this answer.`));
  toggle.addEventListener("click", () => {
    const open = root.classList.toggle("open");
    toggle.setAttribute("aria-expanded", String(open));
  });
  root.append(toggle, detail);
  return root;
}

/** The composer's meter: the latest reading of the conversation, or an empty gauge. */
export function setComposerMeter(box, data, budget) {
  box.replaceChildren();
  const reading = data || { budget: budget || 0, used: 0, context_size: 0, parts: {}, at: "load" };
  if (!reading.budget) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  box.append(renderMeter(reading, { label: data ? "Context" : "Context (empty)" }));
  // "Compact now" lives in the gauge (app.js shows what it would summarise first).
  const compact = el("button", "btn btn-small compact-now", "Compact now");
  compact.type = "button";
  compact.id = "compact-now";
  compact.title = "Summarise the older messages now (shows what and the saving first)";
  box.append(compact);
}
