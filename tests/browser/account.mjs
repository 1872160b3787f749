// The signed-in user and Sign out, against `ctxstack serve --auth` (tests/test_browser.py):
//
//   node tests/browser/account.mjs <base-url> <artifacts-dir> <token>
//
// Signs in with the token, checks the sidebar names the user and the settings panel says
// sign-in is required, signs out (the login form returns and the token is forgotten, also
// after a reload). Prints one JSON line.

import { join } from "node:path";

import { checks, expect, inBrowser, scriptArgs } from "./kit.mjs";

const { baseUrl, artifacts, rest: [token] } = scriptArgs("account.mjs");

await inBrowser({ name: "account", baseUrl, artifacts, viewport: { width: 390, height: 844 },
  fullPage: false, failureShot: "account-failure.png" }, async (page, errors) => {
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
});
