// Formatting shared by the page and its tests (pure functions, no DOM).

/** Tokens as thousands with one decimal: 1234 → "1.2k" (the done card's format). */
export function fmtK(tokens) {
  return `${(Number(tokens || 0) / 1000).toFixed(1)}k`;
}

/** The done card's usage line: "X.Xk in / X.Xk out". */
export function usageText(usage) {
  return `${fmtK(usage?.input_tokens)} in / ${fmtK(usage?.output_tokens)} out`;
}

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * The compact divider's text for a `compact` event payload. Counts are over stored
 * history only (never the system prompt or the current question): "12 earlier messages
 * summarized by AI" when an LLM wrote a summary, "5 earlier messages trimmed" when older
 * messages were only dropped, "3 old tool outputs cleared" when tool results were masked.
 * Payloads stored before `summarized_messages` existed keep their old wording.
 */
export function dividerText(data) {
  const original = Number(data?.original_messages ?? 0);
  if (data?.summarized_messages === undefined) {
    const noun = original === 1 ? "message" : "messages";
    return data?.method === "truncate"
      ? `Earlier context (${original} ${noun}) was trimmed.`
      : `Earlier context (${original} ${noun}) was summarized by AI.`;
  }
  if (data.method === "mask") {
    return `${plural(Number(data.cleared_tool_outputs || 0), "old tool output", "old tool outputs")} cleared`;
  }
  if (data.method === "truncate") {
    const dropped = Math.max(0, original - Number(data.kept_messages || 0) - Number(data.summarized_messages || 0));
    return `${plural(dropped, "earlier message", "earlier messages")} trimmed`;
  }
  return `${plural(Number(data.summarized_messages), "earlier message", "earlier messages")} summarized by AI`;
}

/** The context meter's parts in display order, with labels. */
export const METER_PARTS = [
  ["system", "System prompt"],
  ["summary", "Summary"],
  ["history", "History"],
  ["tools", "Tool outputs"],
  ["question", "Question"],
];

/**
 * A `context` event payload as meter rows: [{part, label, tokens, share}] where share is
 * the part's fraction of the budget (0..1), plus the total line "3.1k / 6.0k tokens (52%)".
 */
export function meterRows(data) {
  const budget = Math.max(1, Number(data?.budget || 0));
  const parts = data?.parts || {};
  return METER_PARTS.map(([part, label]) => {
    const tokens = Number(parts[part] || 0);
    return { part, label, tokens, share: tokens / budget };
  });
}

export function meterLabel(data) {
  const budget = Number(data?.budget || 0);
  const used = Number(data?.used || 0);
  const percent = budget ? Math.round((used / budget) * 100) : 0;
  return `${fmtK(used)} / ${fmtK(budget)} tokens (${percent}%)`;
}

/** A value as text for a step card: strings as they are, anything else as indented JSON. */
export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** ``text`` cut to ``n`` characters, marked with "…" when cut. */
export function clip(text, n) {
  const s = String(text ?? "");
  return s.length > n ? `${s.slice(0, n)}…` : s;
}
