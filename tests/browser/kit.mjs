// What the browser scripts (tests/browser/*.mjs, run by tests/test_browser.py) share: their
// arguments, one headless chromium session on a fresh profile whose outcome is printed as
// one JSON line, and the page actions several of them use.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** What the script checked, by name: printed with the outcome, passed or not. */
export const checks = {};

/** A 1x1 PNG, to attach. */
export const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
  "base64",
);

/** Chromium flags that keep a test browser from calling home while it runs. */
export const QUIET = ["--disable-background-networking", "--disable-component-update",
  "--disable-sync"];

/**
 * `node <script> <base-url> <artifacts-dir> [more…]`: the arguments (usage and exit 2
 * without the first two), the artifacts directory created.
 */
export function scriptArgs(script) {
  const [baseUrl, artifacts, ...rest] = process.argv.slice(2);
  if (!baseUrl || !artifacts) {
    console.error(`usage: node ${script} <base-url> <artifacts-dir>`);
    process.exit(2);
  }
  mkdirSync(artifacts, { recursive: true });
  return { baseUrl, artifacts, rest };
}

export function expect(condition, message) {
  if (!condition) throw new Error(message);
}

/**
 * Run `body(page, errors)` in headless chromium on a fresh profile, then print the outcome
 * as one JSON line: {"ok": true, "checks": {…}}, or {"ok": false, "error": "…", "checks":
 * {…}} after a screenshot `failureShot` in `artifacts` (exit code 1). `errors` collects
 * the page's uncaught errors, and with `consoleErrors` its console errors too; `clipboard`
 * lets the page read and write the clipboard. The profile is removed either way.
 */
export async function inBrowser(
  { name, baseUrl, artifacts, failureShot, flags = [], viewport = { width: 1280, height: 860 },
    clipboard = false, consoleErrors = false, fullPage = true },
  body,
) {
  const profile = mkdtempSync(join(tmpdir(), `ctxstack-${name}-`));
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", ...flags],
      viewport,
    });
    if (clipboard) {
      await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseUrl });
    }
    const page = context.pages()[0] || (await context.newPage());
    const errors = [];
    if (consoleErrors) {
      page.on("console", (msg) => { if (msg.type() === "error") errors.push(msg.text()); });
    }
    page.on("pageerror", (err) => errors.push(String(err)));
    await body(page, errors);
    console.log(JSON.stringify({ ok: true, checks }));
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  } catch (error) {
    try {
      const page = context?.pages()[0];
      if (page) await page.screenshot({ path: join(artifacts, failureShot), fullPage });
    } catch { /* best effort */ }
    console.log(JSON.stringify({ ok: false, error: String(error?.stack || error), checks }));
    await context?.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
    process.exit(1);
  }
}

/** Send `text` from the composer; the new answer card, once it appears. */
export async function send(page, text) {
  const before = await page.locator(".msg.assistant").count();
  await page.fill("#query", text);
  await page.press("#query", "Enter");
  const turn = page.locator(".msg.assistant").nth(before);
  await turn.waitFor({ timeout: 15000 });
  return turn;
}

/** GET /api/conversations/<the open conversation>/<resource> from the page, as JSON. */
export async function openConversation(page, resource) {
  return page.evaluate(async (what) => {
    const id = decodeURIComponent(location.hash.replace("#c=", ""));
    return (await fetch(`/api/conversations/${id}/${what}`)).json();
  }, resource);
}
