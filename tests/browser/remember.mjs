// Issue 16 in a real browser: what the model remembers, shown. Drives Debian's chromium
// (playwright-core) against `ctxstack serve` with the offline demo model and NO budget
// variables — the first run a newcomer gets. Called by tests/test_browser.py:
//
//   node tests/browser/remember.mjs <base-url> <artifacts-dir>
//
// Checks: the 8K window in the banner and sidebar; the divider within 6 turns, its count
// and position (right after the last summarised stored message) live and after a reload,
// equal to GET /compactions; the remembers panel, and once a summary condensed an earlier
// one, its sources nested with their ranges (issue 29); the context meter on the answer card
// and the composer, with details on hover; Copy and Regenerate; Stop keeping the partial
// answer (live and after a reload); the settings panel; the DAG plan graph (live states,
// result on click, after a reload); a 390 px phone width; /docs showing the SSE payloads.
// Prints one JSON line.

import { join } from "node:path";

import { QUIET, checks, expect, inBrowser, openConversation, scriptArgs, send } from "./kit.mjs";

const { baseUrl, artifacts } = scriptArgs("remember.mjs");
const DIVIDER = /^(\d+) earlier messages? summarized by AI/;
const QUESTIONS = [
  "How many words are in this sentence about context windows?",
  "What is 12*7? Ticket TCK-4521 needs it.",
  "Tell me about budgets.",
  "Summarise what we said so far.",
  "What is 2+3?",
  "Explain compaction once more.",
  "And what about tools?",
];
const MORE_QUESTIONS = [
  "What is 9*9? Ticket TCK-7788 too.",
  "Tell me about tools again.",
  "Summarise everything once more.",
  "What is 4+4?",
  "Explain budgets again.",
  "One more question about windows.",
  "How do summaries keep their sources?",
  "What is 100/4?",
];
async function shot(page, name) {
  await page.screenshot({ path: join(artifacts, name) });
}

async function sendAndWait(page, text) {
  const turn = await send(page, text);
  await turn.locator(".done-card, .turn-error, .turn-stopped").first().waitFor({ timeout: 60000 });
  await page.locator("#composer").waitFor({ state: "visible", timeout: 10000 });
  return turn;
}

/** The divider as the page shows it, and the message right above it. */
async function dividerState(page) {
  return page.evaluate(() => {
    const d = document.querySelector("#messages > .conversation-divider");
    if (!d) return null;
    const all = [...document.querySelectorAll("#messages > .msg")];
    const above = all.filter((m) => m.compareDocumentPosition(d) & Node.DOCUMENT_POSITION_FOLLOWING);
    return {
      text: d.querySelector(".divider-text").textContent,
      lastSeq: Number(d.dataset.lastSeq),
      anchorSeq: Number(d.previousElementSibling?.dataset.seq),
      above: above.length,
      below: all.length - above.length,
    };
  });
}

await inBrowser({ name: "remember", baseUrl, artifacts, flags: QUIET, clipboard: true,
  consoleErrors: true, failureShot: "remember-failure.png" }, async (page, consoleErrors) => {

  // ---- a first run states the demo model's 8K window
  // /api/info and /api/me are held back a second on this first load, as on a busy
  // machine: the checks below must wait for the page, not race it.
  const slow = async (route) => { await new Promise((r) => setTimeout(r, 1000)); await route.continue(); };
  await page.route("**/api/info", slow);
  await page.route("**/api/me", slow);
  await page.goto(baseUrl, { waitUntil: "domcontentloaded" });
  // The banner is filled (and unhidden) once /api/info answers: wait for that, not for
  // the element, or a slow first answer reads the empty, hidden box.
  const bannerBox = page.locator("#demo-banner");
  await bannerBox.waitFor({ state: "visible", timeout: 10000 });
  const banner = await bannerBox.innerText();
  expect(banner.includes("8K context window"), `banner: ${banner}`);
  const model = await page.locator("#sidebar-model").innerText();
  expect(model.includes("8K window") && model.includes("4.0k for context"), `sidebar: ${model}`);
  const user = page.locator("#sidebar-user");  // filled after /api/me, later still
  await user.waitFor({ state: "visible", timeout: 10000 });
  expect((await user.innerText()).includes("Local user"), "no user in the sidebar");
  checks.banner = banner;
  checks.sidebar_model = model;
  await page.unroute("**/api/info", slow);
  await page.unroute("**/api/me", slow);

  // ---- talk until the divider appears (at most 6 turns with no variables)
  let divider = null;
  let turns = 0;
  // A mid-turn compaction can draw the divider before the first *load* compaction, which
  // is what GET /compactions lists: talk until both exist.
  while ((!divider || !(await openConversation(page, "compactions")).length) && turns < QUESTIONS.length) {
    await sendAndWait(page, QUESTIONS[turns]);
    turns += 1;
    // live: the divider is drawn while the turn runs, once the earlier messages' seqs are
    // known (a moment after each turn) — allow that moment on a busy machine
    await page.locator("#messages > .conversation-divider").waitFor({ timeout: turns >= 6 ? 5000 : 300 })
      .catch(() => {});
    divider = await dividerState(page);
  }
  expect(divider, `no divider after ${turns} turns`);
  expect(turns <= 7, `the divider took ${turns} turns`);
  checks.divider_turn = turns;
  const match = DIVIDER.exec(divider.text);
  expect(match, `divider text: ${divider.text}`);
  const listed = await openConversation(page, "compactions");
  const entry = listed[listed.length - 1];  // the newest compaction is what the divider shows
  expect(entry, "GET /compactions is empty after the divider appeared");
  expect(Number(match[1]) === entry.summarized_messages, `divider says ${match[1]}, API ${entry.summarized_messages}`);
  expect(divider.lastSeq === entry.last_seq, `divider at ${divider.lastSeq}, API last_seq ${entry.last_seq}`);
  expect(divider.anchorSeq === entry.last_seq, `the message above the divider is #${divider.anchorSeq}`);
  expect(divider.above === entry.summarized_messages, `${divider.above} messages above the divider`);
  checks.divider_live = divider;
  await page.locator(".conversation-divider").scrollIntoViewIfNeeded();
  await shot(page, "remember-divider-live.png");

  // ---- the meter: on the answer card and the composer, details on hover
  const cardMeter = page.locator(".msg.assistant").last().locator(".meter");
  const used = Number(await cardMeter.getAttribute("data-used"));
  expect(used > 0 && Number(await cardMeter.getAttribute("data-budget")) === 4000, "card meter values");
  expect(Number(await page.locator("#composer-meter .meter").getAttribute("data-used")) === used,
    "the composer meter does not show the last call");
  await cardMeter.scrollIntoViewIfNeeded();
  await cardMeter.locator(".meter-toggle").hover();
  const detail = cardMeter.locator(".meter-detail");
  await detail.waitFor({ state: "visible", timeout: 5000 });
  const detailText = await detail.innerText();
  for (const part of ["System prompt", "Summary", "History", "Tool outputs", "Question"]) {
    expect(detailText.includes(part), `meter details lack ${part}: ${detailText}`);
  }
  checks.meter = { used, detail: detailText.replace(/\s+/g, " ") };
  await shot(page, "remember-meter.png");
  await page.mouse.move(5, 5);

  // ---- what the model remembers
  await page.locator(".conversation-divider .divider-button").click();
  const dialog = page.locator("#remembers");
  await dialog.locator(".remember-summary").waitFor({ timeout: 5000 });
  const remembered = await dialog.innerText();
  expect(remembered.includes(`#${entry.first_seq}–#${entry.last_seq}`), `range missing: ${remembered}`);
  expect(remembered.includes("The user asked"), "the summary text is not shown");
  const facts = await dialog.locator(".remember-facts li").allInnerTexts();
  expect(facts.length >= 1 && facts.every((f) => entry.facts.includes(f)), `facts: ${facts}`);
  const firstTree = await dialog.locator(".remember-tree").innerText();
  expect(firstTree.includes(`Summary ${entry.ref}`), `the panel does not name ${entry.ref}: ${firstTree}`);
  checks.remembers = { facts, range: `${entry.first_seq}-${entry.last_seq}` };
  await shot(page, "remember-dialog.png");
  await dialog.locator(".dialog-close").click();

  // ---- reload: the same divider in the same place
  await page.reload({ waitUntil: "domcontentloaded" });
  await page.locator("#messages > .conversation-divider").waitFor({ timeout: 10000 });
  const reloaded = await dividerState(page);
  expect(JSON.stringify(reloaded) === JSON.stringify(divider), `after reload ${JSON.stringify(reloaded)} vs ${JSON.stringify(divider)}`);
  expect(await page.locator(".turn-error").count() === 0, "a reloaded turn shows an error box");
  checks.divider_reload = reloaded;

  // ---- talk on until a summary condenses an earlier one: the panel nests them (issue 29)
  let lastAsked = QUESTIONS[turns - 1];
  let saved = await openConversation(page, "compactions");
  for (const question of MORE_QUESTIONS) {
    if (saved.length >= 2) break;
    await sendAndWait(page, question);
    lastAsked = question;
    saved = await openConversation(page, "compactions");
  }
  expect(saved.length >= 2, `only ${saved.length} saved summaries after ${MORE_QUESTIONS.length} more turns`);
  const newest = saved[saved.length - 1];
  const earlierRefs = new Set(saved.slice(0, -1).map((c) => c.ref));
  expect(newest.children.length >= 1 && newest.children.every((c) => earlierRefs.has(c.ref)),
    `children ${JSON.stringify(newest.children)} are not earlier summaries`);
  await page.reload({ waitUntil: "domcontentloaded" });
  await page.locator("#messages > .conversation-divider").waitFor({ timeout: 10000 });
  await page.locator(".conversation-divider .divider-button").click();
  await dialog.locator(".remember-tree .remember-child").first().waitFor({ timeout: 5000 });
  const childTexts = await dialog.locator(".remember-tree .remember-child").allInnerTexts();
  expect(childTexts.length === newest.children.length, `panel children: ${childTexts}`);
  newest.children.forEach((child, i) => {
    const range = child.first_seq === child.last_seq ? `#${child.first_seq}` : `#${child.first_seq}–#${child.last_seq}`;
    expect(childTexts[i].includes(child.ref) && childTexts[i].includes(range), `child ${i}: ${childTexts[i]} vs ${JSON.stringify(child)}`);
  });
  const own = await dialog.locator(".remember-tree .remember-own").innerText();
  expect(own.includes(`#${newest.own_first_seq}–#${newest.own_last_seq}`), `own part: ${own}`);
  checks.tree = { ref: newest.ref, children: childTexts, own };
  await shot(page, "remember-tree.png");
  await dialog.locator(".dialog-close").click();

  // ---- copy and regenerate
  const lastTurn = page.locator(".msg.assistant").last();
  await lastTurn.locator(".copy-btn").click();
  await lastTurn.locator(".copy-btn", { hasText: "Copied" }).waitFor({ timeout: 3000 });
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  expect(copied.includes("Answer (demo model)"), `clipboard: ${copied.slice(0, 80)}`);
  expect(await page.locator(".regen-btn").count() === 1, "Regenerate should be on the last answer only");
  const answers = await page.locator(".msg.assistant").count();
  const questions = await page.locator(".msg.user").count();
  await page.locator(".regen-btn").click();
  // the answer is replaced: as many answers and questions as before (issue 31)
  await page.locator(".msg.assistant").nth(answers - 1).locator(".done-card").waitFor({ timeout: 60000 });
  expect(await page.locator(".msg.assistant").count() === answers, "Regenerate added an answer");
  expect(await page.locator(".msg.user").count() === questions, "Regenerate asked the question again");
  const lastQuestion = await page.locator(".msg.user .bubble").last().innerText();
  expect(lastQuestion === lastAsked, `regenerate asked: ${lastQuestion}`);
  checks.copy_regenerate = true;

  // ---- Stop keeps the partial answer, neutral, also after a reload
  const stopped = await send(page, "Tell me everything about context windows, slowly.");
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll(".msg.assistant")].pop().querySelector(".answer");
    return a && a.textContent.length > 300;
  }, null, { timeout: 30000 });
  await page.click("#stop");
  await stopped.locator(".turn-stopped").waitFor({ timeout: 10000 });
  const partial = await stopped.locator(".answer").innerText();
  expect(partial.length > 300, "the partial answer was not kept");
  expect(await stopped.locator(".turn-error").count() === 0, "Stop shows an error box");
  await shot(page, "remember-stopped.png");
  // the server saves the stopped turn right after the disconnect: wait until it is stored
  await page.waitForFunction(async () => {
    const id = decodeURIComponent(location.hash.replace("#c=", ""));
    const messages = await (await fetch(`/api/conversations/${id}/messages`)).json();
    return messages.at(-1)?.status === "stopped";
  }, null, { timeout: 15000, polling: 250 });
  await page.reload({ waitUntil: "domcontentloaded" });
  const again = page.locator(".msg.assistant").last();
  await again.locator(".turn-stopped").waitFor({ timeout: 10000 });
  const stored = await again.locator(".answer").innerText();
  expect(stored.length > 300 && partial.startsWith(stored.slice(0, 200)), "reload lost the stopped text");
  expect(await again.locator(".turn-error").count() === 0, "a reloaded stopped turn shows an error box");
  checks.stop = { live: partial.length, stored: stored.length };

  // ---- settings panel: model, budget, mode
  await page.click("#open-settings");
  const settings = await page.locator("#settings").innerText();
  expect(settings.includes("ctxstack-demo") && settings.includes("8,000 tokens") && settings.includes("4,000 tokens"),
    `settings: ${settings}`);
  await page.locator('#settings input[value="dag"]').check();
  await shot(page, "remember-settings.png");
  await page.locator("#settings .dialog-close").click();
  expect(await page.locator('.mode input[value="dag"]').isChecked(), "the settings panel did not switch the mode");
  checks.settings = true;

  // ---- DAG mode: the plan as a graph, live states, result on click, after a reload
  await page.evaluate(() => {
    window.__dagStates = new Set();
    new MutationObserver(() => {
      for (const n of document.querySelectorAll(".dag-node")) window.__dagStates.add(n.getAttribute("class"));
    }).observe(document.querySelector("#messages"), { subtree: true, childList: true, attributes: true });
  });
  const dagTurn = await sendAndWait(page, "Compare 6*7 with the length of this question.");
  const nodes = dagTurn.locator(".dag-node");
  const count = await nodes.count();
  expect(count >= 1, "no plan graph in a DAG turn");
  const states = await page.evaluate(() => [...window.__dagStates]);
  expect(states.some((c) => c.includes("status-running")), `never saw a running step: ${states}`);
  for (let i = 0; i < count; i += 1) {
    expect((await nodes.nth(i).getAttribute("class")).includes("status-done"), "a step is not done");
  }
  await nodes.first().click();
  const stepDetail = await dagTurn.locator(".dag-detail").innerText();
  expect(/Step \S+ · done/.test(stepDetail), `step detail: ${stepDetail}`);
  await dagTurn.locator(".dag-plan").scrollIntoViewIfNeeded();
  await shot(page, "remember-dag.png");
  await page.reload({ waitUntil: "domcontentloaded" });
  const dagAgain = page.locator(".msg.assistant").last();
  await dagAgain.locator(".dag-node").first().waitFor({ timeout: 10000 });
  expect(await dagAgain.locator(".dag-node.status-done").count() === count, "reload lost the plan graph");
  checks.dag = { steps: count, states };

  // ---- phone width
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(400);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(overflow <= 1, `the page scrolls sideways at 390 px (${overflow}px)`);
  await page.locator("#messages > .conversation-divider").scrollIntoViewIfNeeded();
  expect(await page.locator("#messages > .conversation-divider").isVisible(), "no divider at phone width");
  expect(await page.locator("#composer-meter .meter").isVisible(), "no composer meter at phone width");
  await shot(page, "remember-phone.png");
  await page.locator("#messages > .conversation-divider .divider-button").click();
  await page.locator("#remembers .remember-summary").waitFor({ timeout: 5000 });
  await shot(page, "remember-phone-dialog.png");
  await page.locator("#remembers .dialog-close").click();
  checks.phone = true;

  // ---- the API reference shows every SSE event's payload
  await page.setViewportSize({ width: 1280, height: 860 });
  await page.goto(`${baseUrl}/docs`, { waitUntil: "domcontentloaded" });
  const chatOp = page.locator("details.docs-op", { hasText: "/api/chat" }).first();
  await chatOp.locator("summary").click();
  const reference = await chatOp.innerText();
  for (const field of ["summarized_messages", "cleared_tool_outputs", "last_seq", "\"context\"",
    "\"dag_step\"", "model_calls", "text/event-stream"]) {
    expect(reference.includes(field), `/docs does not show ${field} for POST /api/chat`);
  }
  const sse = chatOp.locator(".docs-schema", { hasText: "text/event-stream" }).first();
  await sse.locator("pre").first().evaluate((pre) => { pre.scrollTop = pre.scrollHeight / 4; });
  await sse.scrollIntoViewIfNeeded();
  await shot(page, "remember-docs.png");
  checks.docs = true;

  const realErrors = consoleErrors.filter((e) => !/favicon/i.test(e));
  expect(realErrors.length === 0, `console errors: ${realErrors.join(" | ")}`);
});
