// The signed-in user and Sign out, against `ctxstack serve --auth` (tests/test_browser.py):
//
//   node tests/browser/account.mjs <base-url> <artifacts-dir> <token>
//
// Signs in with the token, checks the sidebar names the user and the settings panel says
// sign-in is required, signs out (the login form returns and the token is forgotten, also
// after a reload). Prints one JSON line.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [baseUrl, artifacts, token] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });
const checks = {};
const profile = mkdtempSync(join(tmpdir(), "ctxstack-account-"));
let context;

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
    viewport: { width: 390, height: 844 },
  });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on("pageerror", (err) => errors.push(String(err)));
  await page.goto(baseUrl, { waitUntil: "domcontentloaded" });
  await page.locator("#login").waitFor({ state: "visible", timeout: 10000 });
  await page.fill("#token-input", token);
  await page.press("#token-input", "Enter");
  await page.locator("#login").waitFor({ state: "hidden", timeout: 10000 });
  await page.click("#toggle-sidebar");
  const user = page.locator("#sidebar-user");
  await user.waitFor({ state: "visible", timeout: 5000 });
  const text = await user.innerText();
  expect(text.includes("Signed in as") && text.includes("alice"), `sidebar: ${text}`);
  checks.sidebar = text;
  await page.screenshot({ path: join(artifacts, "account-sidebar.png") });
  await page.click("#sidebar-user .sign-out");
  await page.locator("#login").waitFor({ state: "visible", timeout: 5000 });
  expect(await page.evaluate(() => localStorage.getItem("ctxstack.token")) === null, "the token was kept");
  await page.reload({ waitUntil: "domcontentloaded" });
  await page.locator("#login").waitFor({ state: "visible", timeout: 10000 });
  checks.signed_out = true;
  expect(errors.length === 0, `page errors: ${errors.join(" | ")}`);
  console.log(JSON.stringify({ ok: true, checks }));
  await context.close();
  rmSync(profile, { recursive: true, force: true });
} catch (error) {
  try { await context?.pages()[0]?.screenshot({ path: join(artifacts, "account-failure.png") }); } catch { /* */ }
  console.log(JSON.stringify({ ok: false, error: String(error?.stack || error), checks }));
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
