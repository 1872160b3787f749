// Formatting shared by the page and its tests (pure functions, no DOM).

/** Tokens as thousands with one decimal: 1234 → "1.2k" (the done card's format). */
export function fmtK(tokens) {
  return `${(Number(tokens || 0) / 1000).toFixed(1)}k`;
}

/** The done card's usage line: "X.Xk in / X.Xk out". */
export function usageText(usage) {
  return `${fmtK(usage?.input_tokens)} in / ${fmtK(usage?.output_tokens)} out`;
}

/**
 * The compact divider's text for a `compact` event payload
 * ({original_messages, kept_messages, method}): "summarized by AI" when an LLM wrote a
 * summary, "trimmed" when older messages were only dropped.
 */
export function dividerText(data) {
  const n = Number(data?.original_messages ?? 0);
  const noun = n === 1 ? "message" : "messages";
  return data?.method === "truncate"
    ? `Earlier context (${n} ${noun}) was trimmed.`
    : `Earlier context (${n} ${noun}) was summarized by AI.`;
}
