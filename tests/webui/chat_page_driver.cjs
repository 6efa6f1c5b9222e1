// chat_page_driver.cjs — drives the chat page in headless Chromium for
// test_chat_page.sh. Environment: PW_CORE (path of the playwright-core
// package), BASE_URL, ARTIFACTS (directory for the screenshot), API_KEY
// (set when the server requires one), BROWSER_DATA (a fresh profile directory).
// Prints one "ok ..." line per check and exits non-zero at the first failure.
"use strict";
const path = require("path");
const { chromium } = require(process.env.PW_CORE);

const BASE = process.env.BASE_URL;
// Sanitized builds generate several times slower.
const WAIT = process.env.EMBER_SANITIZED ? 180000 : 30000;

function ok(msg) { console.log("ok   " + msg); }
function fail(msg) { throw new Error(msg); }

async function lastAssistant(page) {
  return page.locator(".msg.assistant").last();
}

// Waits until the last assistant reply leaves the "streaming" state.
async function waitReplyEnd(page, count) {
  await page.waitForFunction((n) => {
    const all = document.querySelectorAll(".msg.assistant");
    return all.length >= n && all[n - 1].dataset.state !== "streaming";
  }, count, { timeout: WAIT });
  return page.locator(".msg.assistant").nth(count - 1);
}

// Records, inside the page, every length the reply text goes through while it
// streams; with stopAtFirst the Stop button is clicked as soon as text shows.
async function watchNextReply(page, stopAtFirst) {
  await page.evaluate((stop) => {
    window.__lengths = [];
    if (window.__observer) window.__observer.disconnect();
    const log = document.getElementById("log");
    const obs = new MutationObserver(() => {
      const all = document.querySelectorAll(".msg.assistant .content");
      if (!all.length) return;
      const len = all[all.length - 1].textContent.length;
      const arr = window.__lengths;
      if (!arr.length || arr[arr.length - 1] !== len) arr.push(len);
      if (stop && len > 0 && !window.__stopped) {
        window.__stopped = true;
        document.getElementById("stop").click();
      }
    });
    window.__stopped = false;
    window.__observer = obs;
    obs.observe(log, { childList: true, subtree: true, characterData: true });
  }, stopAtFirst);
}

async function send(page, text) {
  await page.fill("#input", text);
  await page.click("#send");
}

async function main() {
  // A persistent context is how playwright passes --user-data-dir (a fresh,
  // empty directory every run).
  const browser = await chromium.launchPersistentContext(process.env.BROWSER_DATA, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1100, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = browser.pages()[0] || await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    // The page must not reach anything but the server that served it.
    page.on("request", (r) => { if (!r.url().startsWith(BASE)) errors.push("external request: " + r.url()); });

    await page.goto(BASE + "/", { waitUntil: "load" });
    if (process.env.API_KEY) {
      // The first request gets 401: the page asks for the key, then retries.
      await page.waitForSelector("#key-dialog[open]", { timeout: WAIT });
      await page.fill("#key-input", "wrong-key");
      await page.click('#key-form button[value="ok"]');
      await page.waitForSelector("#key-dialog[open]", { timeout: WAIT }); // asked again
      await page.fill("#key-input", process.env.API_KEY);
      await page.click('#key-form button[value="ok"]');
      ok("asked for the API key on 401, asked again after a wrong one");
    }
    await page.waitForFunction(() => {
      const t = document.getElementById("model").textContent;
      return t && t !== "connecting...";
    }, null, { timeout: WAIT });
    const modelName = await page.textContent("#model");
    const headers = process.env.API_KEY ? { Authorization: "Bearer " + process.env.API_KEY } : {};
    const models = await (await fetch(BASE + "/v1/models", { headers })).json();
    if (modelName !== models.data[0].id) fail("model name shown as '" + modelName + "', server says '" + models.data[0].id + "'");
    ok("page loaded, model name '" + modelName + "' from /v1/models");
    if (process.env.API_KEY) {
      const stored = await page.evaluate(() => sessionStorage.getItem("ember.apiKey"));
      if (stored !== process.env.API_KEY) fail("API key not kept in sessionStorage");
      ok("API key kept in sessionStorage");
    }

    // Greedy decoding, so the demo model's replies are the ones it was trained to give.
    await page.click("#toggle-settings");
    await page.fill("#temperature", "0");

    // 1. A streamed reply grows in place, then shows its timing.
    await watchNextReply(page, false);
    await send(page, "Count from 1 to 120.");
    let reply = await waitReplyEnd(page, 1);
    const lengths = await page.evaluate(() => window.__lengths);
    const text1 = await reply.locator(".content").textContent();
    if (await reply.getAttribute("data-state") !== "done") fail("first reply ended as " + await reply.getAttribute("data-state"));
    if (!/\b1, 2, 3\b/.test(text1)) fail("first reply does not count: " + JSON.stringify(text1.slice(0, 200)));
    const growing = lengths.filter((n) => n > 0);
    if (growing.length < 3) fail("reply did not grow while streaming: lengths " + JSON.stringify(lengths));
    const stats1 = await reply.locator(".stats").textContent();
    if (!/TTFT \d+ ms/.test(stats1) || !/tokens\/s/.test(stats1)) fail("stats line lacks TTFT or tokens/s: " + stats1);
    ok("streamed reply grew through " + growing.length + " lengths to " + text1.length + " chars; stats: " + stats1);
    if (process.env.API_KEY) return; // the key run only needs to show that chatting works

    // 2. Stop cancels a reply mid-stream; the page is usable again.
    await watchNextReply(page, true);
    await send(page, "Recite Genesis 1.");
    reply = await waitReplyEnd(page, 2);
    if (await reply.getAttribute("data-state") !== "stopped") fail("reply after Stop is " + await reply.getAttribute("data-state"));
    const stoppedLen = (await reply.locator(".content").textContent()).length;
    await page.waitForTimeout(700);
    const laterLen = (await reply.locator(".content").textContent()).length;
    if (laterLen !== stoppedLen) fail("reply kept growing after Stop: " + stoppedLen + " -> " + laterLen);
    if (!(await page.isVisible("#send")) || await page.isVisible("#stop")) fail("Send/Stop buttons not restored after Stop");
    if (!/stopped/.test(await reply.locator(".stats").textContent())) fail("stats do not say stopped");
    ok("Stop cancelled the reply at " + stoppedLen + " chars; it did not grow afterwards");

    // 3. Markdown: a code block is rendered as code, HTML in text is not interpreted.
    await send(page, "Write a Python function that adds two numbers.");
    reply = await waitReplyEnd(page, 3);
    const code = await reply.locator(".content pre code").first().textContent({ timeout: WAIT });
    if (!/def add\(a, b\)/.test(code)) fail("code block missing: " + code);
    ok("markdown code block rendered: " + JSON.stringify(code.split("\n")[0]));
    await send(page, "<img src=x onerror=\"window.__xss=1\"> hi");
    await waitReplyEnd(page, 4);
    if (await page.evaluate(() => window.__xss === 1 || document.querySelector(".msg img") !== null)) fail("HTML in a message was interpreted");
    ok("HTML typed into the chat is shown as text");

    // 4. Tools: the weather question gives a tool call card; its result gets an answer.
    await page.click("#new-chat");
    await page.check("#tools-on");
    await send(page, "What's the weather in Paris?");
    reply = await waitReplyEnd(page, 1);
    const card = reply.locator(".tool-call").first();
    await card.waitFor({ timeout: WAIT });
    const name = await card.locator(".name").textContent();
    const args = JSON.parse(await card.locator(".tool-args").textContent());
    if (name !== "get_weather" || args.city !== "Paris") fail("tool call card shows " + name + " " + JSON.stringify(args));
    ok("tool call card: " + name + " " + JSON.stringify(args));
    await card.locator(".reply input").fill('{"city": "Paris", "temperature": 18, "unit": "celsius", "condition": "sunny"}');
    await card.locator(".reply button").click();
    reply = await waitReplyEnd(page, 2);
    const answer = await reply.locator(".content").textContent();
    if (!/Paris/.test(answer) || !/18/.test(answer)) fail("answer after the tool result: " + JSON.stringify(answer));
    ok("answer after the tool result: " + JSON.stringify(answer));

    // 5. Thinking on: the reasoning is shown in its own collapsible block.
    await page.uncheck("#tools-on");
    await page.check("#thinking");
    await send(page, "What is 7 times 6?");
    reply = await waitReplyEnd(page, 3);
    const reasoning = await reply.locator("details.reasoning .text").textContent({ timeout: WAIT });
    if (!reasoning.trim()) fail("no reasoning shown with thinking on");
    ok("reasoning shown: " + JSON.stringify(reasoning.trim().slice(0, 80)));
    await page.uncheck("#thinking");

    const shot = path.join(process.env.ARTIFACTS, "chat_page.png");
    await page.screenshot({ path: shot, fullPage: false });
    ok("screenshot " + shot);
    if (errors.length) fail("page errors: " + errors.join("; "));
    ok("no script errors, no requests to other origins");
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.log("FAIL " + e.message); process.exit(1); });
