// "What the model remembers": the conversation's one divider and the summary behind it.
//
// The divider sits right after the last stored message the rolling summary covers
// (`last_seq` of the latest `compact` event that has one), between the messages the model
// now only knows through the summary and those it still reads verbatim. Clicking it opens
// a panel with the summary text, the facts kept verbatim and the range of messages covered
// (from GET /api/conversations/{id}/compactions, or the event itself for a summary made
// mid-turn that is not persisted), and for a saved summary what it is made of: the earlier
// summaries it condensed and the messages it summarised itself, each with its range.

import { el } from "./dom.js";
import { dividerText } from "./format.js";

/** The rendered message element with the highest seq at or below `seq` (or null). */
function anchorFor(box, seq) {
  let best = null;
  let bestSeq = -1;
  for (const node of box.querySelectorAll(":scope > .msg[data-seq]")) {
    const s = Number(node.dataset.seq);
    if (s <= seq && s > bestSeq) {
      best = node;
      bestSeq = s;
    }
  }
  return best;
}

/**
 * Put the conversation divider after the message `data.last_seq` (replacing any other).
 * Returns false when that message is not on the page with its seq yet (the caller
 * retries once the seqs are known).
 */
export function placeDivider(box, data, onOpen) {
  if (data?.last_seq == null) return false;
  const anchor = anchorFor(box, Number(data.last_seq));
  if (!anchor) return false;
  box.querySelector(":scope > .conversation-divider")?.remove();
  const divider = el("div", "compact-divider conversation-divider");
  divider.setAttribute("role", "separator");
  divider.dataset.method = data.method || "";
  divider.dataset.lastSeq = String(data.last_seq);
  divider.dataset.summarized = String(data.summarized_messages ?? "");
  const button = el("button", "divider-button");
  button.type = "button";
  button.title = "What the model remembers of the messages above";
  button.append(el("span", "divider-text", dividerText(data)), el("span", "divider-more", "What the model remembers ›"));
  button.addEventListener("click", () => onOpen(data));
  divider.append(button);
  anchor.after(divider);
  return true;
}

function span(first, last, count) {
  const n = `${count} message${count === 1 ? "" : "s"}`;
  if (first == null) return n;
  return first === last ? `#${first} (${n})` : `#${first}–#${last} (${n})`;
}

/**
 * The summary's sources as a small nested list (issue 29): the earlier summaries it
 * condensed, each with the stored messages it summarised itself, then its own messages.
 * Their ranges tile the whole; the assistant can expand any ref with `recall`.
 */
function sourcesTree(entry) {
  const tree = el("ul", "remember-tree");
  const top = el("li", "remember-node");
  top.dataset.ref = entry.ref;
  top.append(el("span", "remember-ref", `Summary ${entry.ref}`), ` · ${span(entry.first_seq, entry.last_seq, entry.summarized_messages)}`);
  const inner = el("ul", "");
  for (const child of entry.children || []) {
    const li = el("li", "remember-child");
    li.dataset.ref = child.ref;
    li.append(el("span", "remember-ref", `Earlier summary ${child.ref}`), ` · ${span(child.first_seq, child.last_seq, child.messages)}`);
    inner.append(li);
  }
  if (entry.own_messages) {
    inner.append(el("li", "remember-own", `Summarised itself · ${span(entry.own_first_seq, entry.own_last_seq, entry.own_messages)}`));
  }
  top.append(inner);
  tree.append(top);
  const wrap = el("div", "");
  wrap.append(tree, el("p", "muted remember-hint", `The assistant can read these back: its recall tool expands ${entry.ref} into the summaries and messages above, and an earlier summary into its messages.`));
  return wrap;
}

function section(title, ...children) {
  const wrap = el("section", "remember-section");
  wrap.append(el("h3", "", title), ...children);
  return wrap;
}

/** Fill and open the remembers dialog for a divider's `compact` payload. */
export async function openRemembers(dialog, data, loadCompactions) {
  const body = dialog.querySelector(".remember-body");
  body.replaceChildren(el("p", "muted", "Loading…"));
  if (!dialog.open) dialog.showModal();
  let entry = null;
  let all = [];
  try {
    all = await loadCompactions();
    entry = all.find((c) => c.last_seq === data.last_seq) || null;
  } catch { /* fall back to the event's own copy */ }
  const shown = entry || data;
  const count = Number(shown.summarized_messages ?? 0);
  const range = shown.first_seq != null
    ? `Stored messages #${shown.first_seq}–#${shown.last_seq} (${count} message${count === 1 ? "" : "s"}) are folded into this summary; the model no longer reads them word for word.`
    : `${count} stored message${count === 1 ? "" : "s"} are folded into this summary.`;
  const summary = el("div", "remember-summary", shown.summary || "(no summary text)");
  const facts = el("ul", "remember-facts");
  for (const fact of shown.facts || []) facts.append(el("li", "", fact));
  if (!(shown.facts || []).length) facts.append(el("li", "muted", "none: the summary itself holds every exact value"));
  const origin = entry
    ? `Saved ${new Date(entry.created_at).toLocaleString()} · ${all.length} summar${all.length === 1 ? "y" : "ies"} in this conversation`
    : "Made during a turn (not saved: the next turn summarises again from the stored messages)";
  const parts = [el("p", "remember-range", range)];
  if (entry?.ref) parts.push(section("What it is made of", sourcesTree(entry)));
  body.replaceChildren(
    ...parts,
    section("Summary", summary),
    section("Facts kept verbatim", facts),
    el("p", "muted remember-origin", origin),
  );
}
