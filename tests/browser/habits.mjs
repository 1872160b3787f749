// Issue 31 in a real browser: chat habits and resumable streams. Drives Debian's chromium
// (playwright-core) against `ctxstack serve` with the offline demo model. Called by
// tests/test_browser.py:
//
//   node tests/browser/habits.mjs <base-url> <artifacts-dir>
//
// Checks: Regenerate on a question with an image replaces the answer (one question, its
// image kept, one answer, stored likewise); Edit of a sent question replaces it and what
// followed; Compact now shows what it would summarise and the saving, then runs (a
// summary is stored, the divider appears) and an edit of a summarised question drops the
// summary and its divider; a reload mid-answer resumes the stream and the
// answer completes (stored "ok", not "stopped"); code blocks get a language label and a
// Copy button. Prints one JSON line.

import { join } from "node:path";

import {
  PNG, QUIET, checks, expect, inBrowser, openConversation, scriptArgs, send,
} from "./kit.mjs";

const { baseUrl, artifacts } = scriptArgs("habits.mjs");

async function waitDone(page) {
  await page.locator(".msg.assistant").last().locator(".done-card").waitFor({ timeout: 60000 });
  await page.locator("#composer").waitFor({ state: "visible", timeout: 10000 });
}

await inBrowser({ name: "habits", baseUrl, artifacts, flags: QUIET, clipboard: true,
  failureShot: "habits-failure.png" }, async (page, consoleErrors) => {
  await page.goto(baseUrl, { waitUntil: "domcontentloaded" });
  await page.locator("#query").waitFor({ timeout: 10000 });

  // ---- Regenerate a question with an image: replaced, not asked again
  await page.setInputFiles("#file-input", { name: "dot.png", mimeType: "image/png", buffer: PNG });
  await page.locator("#attachments .chip").waitFor({ timeout: 10000 });
  await send(page, "What is in this picture?");
  await waitDone(page);
  const first = await openConversation(page, "messages");
  expect(first.length === 2 && first[0].images.length === 1, `first turn stored ${JSON.stringify(first)}`);
  await page.locator(".regen-btn").click();
  await page.waitForFunction(() => !document.querySelector(".msg.assistant .done-card"), null, { timeout: 10000 })
    .catch(() => {});
  await waitDone(page);
  expect(await page.locator(".msg.user").count() === 1, "Regenerate drew a second question");
  expect(await page.locator(".msg.assistant").count() === 1, "Regenerate kept the old answer");
  expect(await page.locator(".msg.user .images img").count() === 1, "the image left the question");
  const regenerated = await openConversation(page, "messages");
  expect(regenerated.length === 2, `after Regenerate ${regenerated.length} messages are stored`);
  expect(regenerated[0].id === first[0].id && regenerated[0].images.length === 1, "the question or its image changed");
  expect(regenerated[1].seq > first[1].seq, "the answer was not replaced");
  checks.regenerate_with_image = true;

  // ---- Edit a sent question: it and what followed are replaced
  await send(page, "A second question?");
  await waitDone(page);
  await page.locator(".msg.user").first().locator(".edit-btn").click();
  await page.locator(".msg.user .edit-text").fill("The first question, edited?");
  await page.locator(".msg.user .edit-save").click();
  await waitDone(page);
  expect(await page.locator(".msg.user").count() === 1, "the question after the edited one is still shown");
  expect((await page.locator(".msg.user .bubble").first().innerText()) === "The first question, edited?", "edited text not shown");
  const edited = await openConversation(page, "messages");
  expect(edited.length === 2 && edited[0].content === "The first question, edited?", `after Edit: ${JSON.stringify(edited.map((m) => m.content?.slice(0, 30)))}`);
  checks.edit = true;
  await page.screenshot({ path: join(artifacts, "habits-edit.png") });

  // ---- Compact now: a preview first, then the summary
  await send(page, "Third question?");
  await waitDone(page);
  await send(page, "Fourth question?");
  await waitDone(page);
  await page.click("#compact-now");
  const preview = page.locator("#compact-panel .compact-preview");
  await preview.waitFor({ timeout: 10000 });
  const previewText = await preview.innerText();
  const saving = previewText.match(/estimated saving of ([\d,]+) tokens/);
  expect(/Summarise 2 earlier messages/.test(previewText) && saving && Number(saving[1].replace(/,/g, "")) > 0,
    `preview: ${previewText}`);
  checks.compact_preview = previewText;
  await page.screenshot({ path: join(artifacts, "habits-compact-preview.png") });
  await page.click("#compact-panel .compact-run");
  await page.locator("#compact-panel .compact-done").waitFor({ timeout: 60000 });
  const summaries = await page.evaluate(async () => {
    const id = decodeURIComponent(location.hash.replace("#c=", ""));
    return (await fetch(`/api/conversations/${id}/compactions`)).json();
  });
  expect(summaries.length === 1, `compactions after Compact now: ${summaries.length}`);
  await page.locator("#messages > .conversation-divider").waitFor({ timeout: 10000 });
  checks.compact_now = true;

  // ---- editing a question the summary covers drops the summary and its divider
  await page.locator(".msg.user").first().locator(".edit-btn").click();
  await page.locator(".msg.user .edit-text").fill("Start over?");
  await page.locator(".msg.user .edit-save").click();
  await waitDone(page);
  await page.waitForFunction(() => !document.querySelector("#messages > .conversation-divider"), null,
    { timeout: 10000 });
  const dropped = await page.evaluate(async () => {
    const id = decodeURIComponent(location.hash.replace("#c=", ""));
    return (await fetch(`/api/conversations/${id}/compactions`)).json();
  });
  expect(dropped.length === 0, `the summary survived the edit: ${dropped.length}`);
  checks.edit_invalidates_summary = true;

  // ---- a reload mid-answer resumes the stream
  await send(page, "Tell me everything about context windows, slowly.");
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll(".msg.assistant")].pop().querySelector(".answer");
    return a && a.textContent.length > 100;
  }, null, { timeout: 30000 });
  await page.reload({ waitUntil: "domcontentloaded" });
  // the running turn is drawn again and streams on
  await page.locator("#inject-form").waitFor({ state: "visible", timeout: 15000 });
  checks.resumed_running = true;
  await waitDone(page);
  const after = await openConversation(page, "messages");
  const last = after.at(-1);
  expect(last.role === "assistant" && last.status === "ok", `after the reload the turn ended ${last.status}`);
  const shown = await page.locator(".msg.assistant").last().locator(".answer").innerText();
  expect(shown.includes("Answer (demo model)") && shown.length > 300, "the resumed answer is incomplete");
  expect(await page.locator(".msg.user").count() === after.filter((m) => m.role === "user").length,
    "a question was drawn twice after the reload");
  checks.reload_resumed = { stored: last.content.length, shown: shown.length };

  // ---- code blocks: language label and Copy (an answer with a fence, served to the page)
  await page.route("**/api/conversations/*/messages", async (route) => {
    const now = new Date().toISOString();
    await route.fulfill({ json: [
      { id: 1, seq: 1, role: "user", content: "Show code", kind: "query", images: [], events: [], created_at: now },
      { id: 2, seq: 2, role: "assistant", content: "Here:\n\n```python\nprint(6 * 7)\n```\n", kind: null,
        images: [], events: [], status: "ok", created_at: now },
    ] });
  });
  await page.reload({ waitUntil: "domcontentloaded" });
  const block = page.locator(".msg.assistant .code-block").first();
  await block.waitFor({ timeout: 10000 });
  expect((await block.locator(".code-lang").innerText()).trim() === "python", "no language label");
  await block.locator(".code-copy").click();
  await block.locator(".code-copy", { hasText: "Copied" }).waitFor({ timeout: 3000 });
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  expect(copied.trim() === "print(6 * 7)", `copied: ${copied}`);
  checks.code_copy = true;
  await page.unroute("**/api/conversations/*/messages");

  expect(consoleErrors.length === 0, `page errors: ${consoleErrors.join(" | ")}`);
});
