// A small, safe Markdown renderer for model output.
//
// Safety contract: every character of the input is HTML-escaped before any Markdown rule
// runs, so no tag, attribute or entity the model writes can reach the DOM as markup.
// The only markup in the output is what this module emits itself; link targets are
// allowed only for http:, https: and mailto: URLs (anything else renders as plain text).
//
// Supported: fenced code blocks (``` or ~~~), inline code, ATX headings, paragraphs,
// bold/italic/strikethrough, links, bare http(s) URLs, unordered/ordered lists (one level
// of nesting by indentation), block quotes, horizontal rules and GitHub-style tables.
// An unterminated fence (common while an answer is still streaming) renders as an open
// code block rather than breaking the rest of the text.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function safeHref(escapedUrl) {
  // The URL was escaped with the rest of the text; undo only &amp; to test the scheme.
  const raw = escapedUrl.replace(/&amp;/g, "&").trim();
  if (/^(https?:\/\/|mailto:)/i.test(raw)) return escapedUrl.trim();
  return null;
}

// Inline rules run on already-escaped text. Code spans are cut out first so nothing inside
// them is formatted, then restored at the end.
function renderInline(escaped) {
  const codes = [];
  let text = escaped.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, _ticks, code) => {
    codes.push(`<code>${code.trim()}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  const links = [];
  text = text.replace(/\[([^\]\n]+)\]\(((?:[^()\s]|\([^()\s]*\))+)\)/g, (whole, label, url) => {
    const href = safeHref(url);
    if (href === null) return label;
    links.push(`<a href="${href}" target="_blank" rel="noopener noreferrer">${label}</a>`);
    return `\u0001${links.length - 1}\u0001`;
  });
  // Bare URLs end at whitespace, at an escaped quote or angle bracket, and never with
  // trailing punctuation.
  text = text.replace(/(^|[\s(])(https?:\/\/(?:(?!&quot;|&#39;|&lt;|&gt;)[^\s)])+)/g, (_, pre, url) => {
    const trimmed = url.replace(/(?:[.,;:!?]|&amp;)+$/, "");
    const rest = url.slice(trimmed.length);
    links.push(`<a href="${trimmed}" target="_blank" rel="noopener noreferrer">${trimmed}</a>`);
    return `${pre}\u0001${links.length - 1}\u0001${rest}`;
  });
  text = text
    .replace(/\*\*([^*\n][^*]*?)\*\*/g, "<strong>$1</strong>")
    .replace(/__([^_\n][^_]*?)__/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*([^*\s][^*\n]*?)\*(?!\*)/g, "$1<em>$2</em>")
    .replace(/(^|[^_\w])_([^_\s][^_\n]*?)_(?![_\w])/g, "$1<em>$2</em>")
    .replace(/~~([^~\n]+)~~/g, "<del>$1</del>");
  text = text.replace(/\u0001(\d+)\u0001/g, (_, i) => links[Number(i)]);
  return text.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

const FENCE = /^ {0,3}(```+|~~~+)\s*([\w+#.-]*)\s*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const HR = /^ {0,3}([-*_])( *\1){2,}\s*$/;
const QUOTE = /^ {0,3}&gt;\s?(.*)$/;
const UL = /^(\s*)[-*+]\s+(.*)$/;
const OL = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|")) row = row.slice(0, -1);
  return row.split("|").map((c) => c.trim());
}

function renderList(lines, start) {
  // Collects consecutive list items (and their indented continuations) from `start`.
  const first = lines[start];
  const ordered = !UL.test(first) && OL.test(first);
  const baseIndent = (first.match(/^\s*/) || [""])[0].length;
  const items = [];
  let i = start;
  while (i < lines.length) {
    const line = lines[i];
    const m = ordered ? line.match(OL) : line.match(UL);
    const indent = (line.match(/^\s*/) || [""])[0].length;
    if (m && indent <= baseIndent + 1) {
      items.push([ordered ? m[3] : m[2]]);
      i += 1;
    } else if (line.trim() !== "" && indent > baseIndent && items.length) {
      items[items.length - 1].push(line.slice(Math.min(indent, baseIndent + 2)));
      i += 1;
    } else {
      break;
    }
  }
  const startAttr = ordered ? ` start="${Number(first.match(OL)[2])}"` : "";
  const tag = ordered ? "ol" : "ul";
  const body = items
    .map(([head, ...rest]) => {
      // Lazy continuation lines (wrapped text of the item) belong to the item's first
      // paragraph; what follows them (a nested list, a code block) is rendered as blocks.
      let text = head;
      let k = 0;
      while (k < rest.length && rest[k].trim() !== "" && !UL.test(rest[k]) && !OL.test(rest[k])
             && !/^\s*(```|>|\|)/.test(rest[k])) {
        text += ` ${rest[k].trim()}`;
        k += 1;
      }
      const nested = rest.length > k ? renderBlocks(rest.slice(k)) : "";
      return `<li>${renderInline(text)}${nested}</li>`;
    })
    .join("");
  return [`<${tag}${startAttr}>${body}</${tag}>`, i];
}

function renderBlocks(lines) {
  const out = [];
  let para = [];
  const flush = () => {
    if (para.length) out.push(`<p>${renderInline(para.join("\n")).replace(/\n/g, "<br>")}</p>`);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      flush();
      const marker = fence[1];
      const lang = fence[2];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(marker)) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end, while streaming)
      const cls = lang ? ` class="lang-${lang.replace(/[^\w+#-]/g, "")}"` : "";
      out.push(`<pre><code${cls}>${body.join("\n")}</code></pre>`);
      continue;
    }
    if (line.trim() === "") {
      flush();
      i += 1;
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      flush();
      const level = heading[1].length;
      out.push(`<h${level}>${renderInline(heading[2])}</h${level}>`);
      i += 1;
      continue;
    }
    if (HR.test(line)) {
      flush();
      out.push("<hr>");
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        quoted.push(lines[i].match(QUOTE)[1]);
        i += 1;
      }
      out.push(`<blockquote>${renderBlocks(quoted)}</blockquote>`);
      continue;
    }
    if (UL.test(line) || OL.test(line)) {
      flush();
      const [html, next] = renderList(lines, i);
      out.push(html);
      i = next;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      flush();
      const head = splitRow(line);
      const rows = [];
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim() !== "") {
        rows.push(splitRow(lines[i]));
        i += 1;
      }
      const th = head.map((c) => `<th>${renderInline(c)}</th>`).join("");
      const trs = rows
        .map((r) => `<tr>${head.map((_, k) => `<td>${renderInline(r[k] ?? "")}</td>`).join("")}</tr>`)
        .join("");
      out.push(`<div class="table-wrap"><table><thead><tr>${th}</tr></thead><tbody>${trs}</tbody></table></div>`);
      continue;
    }
    para.push(line);
    i += 1;
  }
  flush();
  return out.join("");
}

/** Render Markdown `source` to an HTML string that is safe to assign to innerHTML. */
export function renderMarkdown(source) {
  const escaped = escapeHtml(String(source ?? "").replace(/\r\n?/g, "\n"));
  return renderBlocks(escaped.split("\n"));
}
