// Times one page of the UI in Debian's chromium (playwright-core, never a
// downloaded browser): from the start of the navigation to the first frame
// painted once the page shows its data, on its first load in a fresh
// browser (the caller has just started the agent: cold) and on reloads
// (warm). A benchmark (bench/ui.sh), not a test: it checks only that the
// page showed its data and no error, so that an empty or failed page is
// never timed as fast.
//
//   node test/firstview.mjs URL PAGE WARM_RUNS OUT.json
//
// URL is the page's address with its hash (http://127.0.0.1:9463/#/flows?...),
// PAGE one of overview, flows, topology, captures, latency. OUT receives
// {page, url, runs: [{ms, ready_ms, api: [{path, ms, ttfb_ms, bytes}]}]},
// the first run cold. Exits 1 if a run failed.
import { chromium } from "playwright-core";
import { writeFileSync } from "node:fs";

const [url, pageName, warmArg, out] = process.argv.slice(2);
const warmRuns = Number(warmArg);

// What each page shows once its data arrived: the page's root is marked
// data-ready when its first view is built (main.ts), and these elements
// exist only if the API's answers filled it.
const shows = {
  overview: ["#top-src tbody tr", "#top-port tbody tr", "#protocols tbody tr", "#chart-bytes .uplot", "#health-ifaces"],
  flows: ["#flows tbody tr.flow"],
  topology: ["#graph canvas", "#topology-info[data-nodes]"],
  captures: ["#triggers", "#traces", "#rules"],
  latency: ["#latency tbody tr", ".hist .hrow"],
};
if (!shows[pageName] || !(warmRuns >= 1)) {
  console.error("usage: node test/firstview.mjs URL overview|flows|topology|captures|latency WARM_RUNS OUT.json");
  process.exit(2);
}

// Set in the page before its own script runs: the time (performance.now(),
// from the navigation's start) at which the page's root is marked ready,
// and at which the next frame is painted.
function watch() {
  const mark = () => {
    if (window.__firstView || !document.querySelector(".page[data-ready]")) return false;
    const ready = performance.now();
    window.__firstView = { ready };
    requestAnimationFrame(() => requestAnimationFrame((t) => (window.__firstView.frame = Math.max(t, ready))));
    return true;
  };
  const obs = new MutationObserver(() => mark() && obs.disconnect());
  obs.observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-ready"] });
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"],
});
const failures = [];
const runs = [];
try {
  // A fresh context: no cache, no storage, as a first visit.
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript(watch);
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  for (let i = 0; i <= warmRuns; i++) {
    errors.length = 0;
    if (i === 0) await page.goto(url, { waitUntil: "commit" });
    else await page.reload({ waitUntil: "commit" });
    await page.waitForFunction(() => window.__firstView?.frame !== undefined, null, { timeout: 60000, polling: 50 });
    const r = await page.evaluate((sels) => {
      const api = performance.getEntriesByType("resource")
        .filter((e) => new URL(e.name).pathname.startsWith("/api/"))
        .map((e) => ({ path: new URL(e.name).pathname + new URL(e.name).search, ms: e.responseEnd - e.startTime,
          ttfb_ms: e.responseStart - e.startTime, bytes: e.encodedBodySize }));
      return { ms: window.__firstView.frame, ready_ms: window.__firstView.ready, api,
        error: document.getElementById("error")?.textContent ?? "", missing: sels.filter((s) => !document.querySelector(s)) };
    }, shows[pageName]);
    const run = i === 0 ? "cold" : `warm ${i}`;
    if (r.error) failures.push(`${run}: the page shows an error: ${r.error}`);
    if (r.missing.length) failures.push(`${run}: no ${r.missing.join(", ")}: the page's data did not arrive`);
    for (const e of errors) failures.push(`${run}: console: ${e}`);
    delete r.error;
    delete r.missing;
    runs.push(r);
  }
} catch (e) {
  failures.push(String(e));
} finally {
  await browser.close();
}
writeFileSync(out, JSON.stringify({ page: pageName, url, runs, failures }, null, 2));
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
