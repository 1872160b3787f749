// Drives Debian's chromium (via playwright-core) against a running `ctxstack serve` with
// the offline demo model and a small budget. Called by tests/test_browser.py:
//
//   node tests/browser/chat.mjs <base-url> <artifacts-dir>
//
// Prints one JSON object on stdout: {"ok": true, "checks": {...}} or
// {"ok": false, "error": "...", "checks": {...}} (exit code 1). Screenshots go to the
// artifacts directory whatever happens.

import { join } from "node:path";

import { PNG, QUIET, checks, expect, inBrowser, scriptArgs, send } from "./kit.mjs";

const { baseUrl, artifacts } = scriptArgs("chat.mjs");

const MAX_TURNS = Number(process.env.CTXSTACK_BROWSER_MAX_TURNS || 9);
const USAGE = /\d+\.\dk in \/ \d+\.\dk out/;
const DIVIDER = /^\d+ earlier messages? (summarized by AI|trimmed)/;

async function sendAndWait(page, text, { inject } = {}) {
  const turn = await send(page, text);
  if (inject) {
    await page.locator("#inject-form").waitFor({ state: "visible", timeout: 5000 });
    checks.inject_box_visible_while_running = true;
    await page.fill("#inject-text", inject);
    await page.press("#inject-text", "Enter");
  }
  await turn.locator(".done-card, .turn-error").first().waitFor({ timeout: 60000 });
  return turn;
}

await inBrowser({ name: "chromium", baseUrl, artifacts, flags: ["--disable-quic", ...QUIET],
  consoleErrors: true, failureShot: "failure.png" }, async (page, consoleErrors) => {
  page.on("dialog", (dialog) => dialog.accept());

  await page.goto(baseUrl, { waitUntil: "domcontentloaded" });
  const banner = page.locator("#demo-banner");
  await banner.waitFor({ state: "visible", timeout: 10000 });
  const bannerText = await banner.innerText();
  expect(/demo model/i.test(bannerText), `demo banner text: ${bannerText}`);
  for (const name of ["LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL"]) {
    expect(bannerText.includes(name), `the demo banner does not name ${name}: ${bannerText}`);
  }
  checks.demo_banner = bannerText;

  // ---- first turn: streamed text, tool steps, usage card
  await page.evaluate(() => {
    window.__answerLengths = [];
    new MutationObserver(() => {
      const answer = document.querySelector(".msg.assistant .answer");
      if (answer && !document.querySelector(".msg.assistant .done-card")) {
        window.__answerLengths.push(answer.textContent.length);
      }
    }).observe(document.querySelector("#messages"), { childList: true, subtree: true, characterData: true });
  });
  const first = await sendAndWait(page, "How many words are in this sentence about context windows?");
  const lengths = await page.evaluate(() => window.__answerLengths);
  const distinct = new Set(lengths.filter((n) => n > 0)).size;
  expect(distinct >= 3, `the answer did not stream (saw ${distinct} partial renders: ${lengths.slice(0, 20)})`);
  checks.streamed_partial_renders = distinct;
  const answerText = await first.locator(".answer").innerText();
  expect(answerText.length > 500, `answer too short: ${answerText.slice(0, 200)}`);
  const card = await first.locator(".done-card").innerText();
  expect(USAGE.test(card), `done card does not match ${USAGE}: ${card}`);
  checks.done_card = card;
  const stepCount = await first.locator("details.steps .step").count();
  expect(stepCount >= 1, "no tool step was shown");
  const stepsOpen = await first.locator("details.steps").evaluate((d) => d.open);
  expect(!stepsOpen, "tool steps should be collapsed once the answer is done");
  await first.locator("details.steps > summary").click();
  expect(await first.locator("details.steps").evaluate((d) => d.open), "tool steps did not expand");
  checks.tool_steps = stepCount;

  const title = await page.locator("#conversation-list li .title").first().innerText();
  expect(title.startsWith("How many words"), `conversation title: ${title}`);

  // ---- model output and user text are escaped, never run
  const hostile = 'Please repeat <img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>';
  const hostileTurn = await sendAndWait(page, hostile);
  const xss = await page.evaluate(() => window.__xss);
  expect(xss === undefined, "HTML in a message was executed");
  const injectedImgs = await page.locator('.messages img[src="x"]').count();
  expect(injectedImgs === 0, "an <img> from message text reached the DOM");
  const echoed = await hostileTurn.locator(".answer").innerText();
  expect(echoed.includes("<img src=x"), "the answer should show the HTML as text");
  checks.html_escaped = true;

  // ---- the Markdown renderer (marked + DOMPurify) on hostile and ordinary input
  const rendered = await page.evaluate(async () => {
    const { renderMarkdown } = await import("./static/markdown.js");
    const box = document.createElement("div");
    box.innerHTML = renderMarkdown([
      "# Title", "", "**bold** and `code <b>` and ~~gone~~", "",
      "[ok](https://example.com/a) [bad](javascript:alert(1)) https://example.org/x.",
      "", "<img src=y onerror=\"window.__md=1\"> ![alt text](https://example.com/i.png)", "",
      "| a | b |", "| --- | --- |", "| 1 | 2 |", "", "```py", "x = 1 < 2",
    ].join("\n"));
    return {
      h1: box.querySelector("h1")?.textContent,
      strong: box.querySelector("strong")?.textContent,
      code: box.querySelector("p code")?.textContent,
      del: box.querySelector("del")?.textContent,
      hrefs: [...box.querySelectorAll("a")].map((a) => [a.getAttribute("href"), a.target, a.rel]),
      imgs: box.querySelectorAll("img").length,
      text: box.textContent,
      cells: [...box.querySelectorAll("td")].map((td) => td.textContent),
      fence: box.querySelector("pre code")?.textContent.trim(),
      ran: window.__md,
    };
  });
  expect(rendered.h1 === "Title" && rendered.strong === "bold" && rendered.del === "gone",
    `headings / emphasis: ${JSON.stringify(rendered)}`);
  expect(rendered.code === "code <b>", `inline code: ${rendered.code}`);
  expect(JSON.stringify(rendered.hrefs) === JSON.stringify([
    ["https://example.com/a", "_blank", "noopener noreferrer"],
    ["https://example.org/x", "_blank", "noopener noreferrer"]]),
    `links: ${JSON.stringify(rendered.hrefs)}`);
  expect(rendered.imgs === 0 && rendered.ran === undefined, "markdown HTML or an image reached the DOM");
  expect(rendered.text.includes("<img src=y") && rendered.text.includes("alt text"),
    `raw HTML and images should show as text: ${rendered.text}`);
  expect(rendered.cells.join() === "1,2", `table: ${rendered.cells}`);
  expect(rendered.fence === "x = 1 < 2", `open fence: ${rendered.fence}`);
  checks.markdown = true;

  // ---- an inject while the turn runs
  const injectTurn = await sendAndWait(page, "Tell me about budgets.", { inject: "Also mention the 4,000 token floor." });
  const injected = await injectTurn.locator(".injected").count();
  expect(injected === 1, `the inject was not shown in the turn (found ${injected})`);
  checks.inject_shown = await injectTurn.locator(".injected").innerText();

  // ---- an image attachment
  await page.setInputFiles("#file-input", { name: "dot.png", mimeType: "image/png", buffer: PNG });
  await page.locator("#attachments .chip").waitFor({ timeout: 10000 });
  const imageTurn = await sendAndWait(page, "What is in this image? Compute 12*7 too.");
  const userImages = await page.locator(".msg.user .images img").count();
  expect(userImages >= 1, "the attached image is not shown with the question");
  expect(USAGE.test(await imageTurn.locator(".done-card").innerText()), "image turn has no usage card");
  checks.image_attached = true;

  // ---- keep talking until history is compacted on load
  let divider = null;
  for (let i = 0; i < MAX_TURNS && !divider; i += 1) {
    await sendAndWait(page, `Turn ${i + 1}: summarise what we said so far, with the number ${100 + i}.`);
    await page.waitForTimeout(300); // the page learns the new messages' seq after the turn
    if (await page.locator(".compact-divider").count()) divider = await page.locator(".compact-divider .divider-text").first().innerText();
  }
  expect(divider !== null, `no compact divider after ${MAX_TURNS} more turns`);
  expect(DIVIDER.test(divider), `divider text: ${divider}`);
  const dashed = await page.locator(".compact-divider").first().evaluate((el) => getComputedStyle(el, "::before").borderTopStyle);
  expect(dashed === "dashed", `divider line style is ${dashed}`);
  checks.compact_divider = divider;
  await page.locator(".compact-divider").first().scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(artifacts, "chat-desktop.png") });

  // ---- reload: history redraws the same dividers and cards
  const liveCards = await page.locator(".done-card").count();
  const liveDividers = await page.locator(".compact-divider").count();
  await page.reload({ waitUntil: "domcontentloaded" });
  await page.locator(".done-card").nth(liveCards - 1).waitFor({ timeout: 10000 });
  expect(await page.locator(".done-card").count() === liveCards, "reload lost usage cards");
  expect(await page.locator(".compact-divider").count() === liveDividers, "reload lost compact dividers");
  expect(await page.locator(".injected").count() >= 1, "reload lost the inject");
  expect(DIVIDER.test(await page.locator(".compact-divider .divider-text").first().innerText()), "reloaded divider text");
  expect(await page.locator(".thinking").count() === 0, "a reloaded answer still shows 'Thinking…'");
  expect(await page.locator("details.steps[open]").count() === 0, "reloaded tool steps should start collapsed");
  checks.reload_cards = liveCards;
  checks.reload_dividers = liveDividers;

  // ---- rename and delete from the list
  const item = page.locator("#conversation-list li").first();
  await item.hover();
  await item.locator(".rename-btn").click();
  await page.fill("#conversation-list input.rename", "Renamed in the browser");
  await page.press("#conversation-list input.rename", "Enter");
  await page.locator("#conversation-list li .title", { hasText: "Renamed in the browser" }).waitFor({ timeout: 5000 });
  checks.renamed = true;
  await page.click("#new-chat");
  await sendAndWait(page, "A second conversation to delete.");
  // the list is reloaded once the turn has ended
  await page.waitForFunction(() => document.querySelectorAll("#conversation-list li").length === 2,
    null, { timeout: 10000 }).catch(() => {});
  expect(await page.locator("#conversation-list li").count() === 2, "second conversation missing");
  const second = page.locator("#conversation-list li.active");
  await second.hover();
  await second.locator(".delete-btn").click();
  await page.waitForFunction(() => document.querySelectorAll("#conversation-list li").length === 1);
  checks.deleted = true;

  // ---- phone width
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(400); // the sidebar slides away
  await page.locator("#conversation-list li").first().evaluate((li) => li.click());
  await page.locator(".done-card").first().waitFor({ timeout: 10000 });
  expect(await page.locator("#toggle-sidebar").isVisible(), "no menu button at phone width");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(overflow <= 1, `the page scrolls sideways at phone width (${overflow}px)`);
  await page.screenshot({ path: join(artifacts, "chat-phone.png") });
  await page.click("#toggle-sidebar");
  await page.waitForTimeout(400);
  await page.screenshot({ path: join(artifacts, "chat-phone-sidebar.png") });
  checks.phone_width = true;

  const realErrors = consoleErrors.filter((e) => !/favicon/i.test(e));
  expect(realErrors.length === 0, `console errors: ${realErrors.join(" | ")}`);
});
