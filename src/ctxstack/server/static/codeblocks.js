// Code blocks in answers: a language label and a Copy button on each <pre><code>.
// Works on whatever the Markdown renderer produced (class "lang-x" or "language-x"),
// after every render, and leaves blocks it already decorated alone.

import { el } from "./dom.js";

export function decorateCodeBlocks(root, copyText) {
  if (!root) return;
  for (const pre of root.querySelectorAll("pre")) {
    if (pre.parentElement?.classList.contains("code-block")) continue;
    const code = pre.querySelector("code");
    if (!code) continue;
    const match = [...code.classList].map((c) => c.match(/^(?:lang|language)-(.+)$/)).find(Boolean);
    const wrap = el("div", "code-block");
    const head = el("div", "code-head");
    head.append(el("span", "code-lang", match ? match[1] : "text"));
    const copy = el("button", "btn btn-small code-copy", "Copy");
    copy.type = "button";
    copy.addEventListener("click", async () => {
      const ok = await copyText(code.textContent || "");
      copy.textContent = ok ? "Copied" : "Copy failed";
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
    head.append(copy);
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
}
