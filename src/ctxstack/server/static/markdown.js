// Model output as Markdown: marked parses (GitHub-flavoured: tables, fenced code,
// strikethrough, autolinked URLs), DOMPurify sanitises what it produced. Both are vendored
// unchanged from npm (vendor/README.md says which versions and how to update them).
//
// Safety contract: raw HTML the model writes is shown as text, never parsed (the `html`
// renderer below escapes it), link targets are allowed only for http:, https: and mailto:
// URLs (anything else renders as its label), images render as their alt text (no remote
// loads), and DOMPurify removes whatever markup could still run. An unterminated fence
// (common while an answer is still streaming) renders as an open code block.

import { Marked } from "./vendor/marked.esm.js";
import "./vendor/purify.min.js"; // UMD: defines globalThis.DOMPurify

const DOMPurify = globalThis.DOMPurify;
const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const SAFE_URL = /^(https?:\/\/|mailto:)/i;

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const marked = new Marked({
  gfm: true,
  renderer: {
    html({ text }) {
      return escapeHtml(text);
    },
    link({ href, title, tokens }) {
      const label = this.parser.parseInline(tokens);
      if (!SAFE_URL.test(href.trim())) return label;
      const titled = title ? ` title="${escapeHtml(title)}"` : "";
      return `<a href="${escapeHtml(href.trim())}"${titled} target="_blank" rel="noopener noreferrer">${label}</a>`;
    },
    image({ text }) {
      return escapeHtml(text);
    },
  },
});

export function renderMarkdown(text) {
  const html = marked.parse(String(text ?? ""), { async: false });
  return DOMPurify.sanitize(html, { ADD_ATTR: ["target"] });
}
