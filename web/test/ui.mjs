// Drives the UI in Debian's chromium (playwright-core, never a downloaded
// browser) against a running agent, and checks what each page shows
// against what the test computed with the CLI on the same store.
//
//   node test/ui.mjs URL EXPECTED.json OUTDIR
//
// EXPECTED holds the CLI's answers (totals, top rows, flows); OUTDIR
// receives the screenshots, the downloads and result.json. Exits 1 with
// the failures listed on stderr.
import { chromium } from "playwright-core";
import { readFileSync, writeFileSync } from "node:fs";

const [base, expectedPath, out] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedPath, "utf8"));
const failures = [];
const fail = (m) => failures.push(m);
const eq = (what, got, exp) => {
  if (String(got) !== String(exp)) fail(`${what}: got ${got}, want ${exp}`);
};

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
const page = await context.newPage();
const consoleErrors = [];
page.on("console", (m) => m.type() === "error" && consoleErrors.push(`${page.url()}: ${m.text()}`));
page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));

async function open(hash) {
  await page.goto(base + "/" + hash);
  await page.waitForSelector(".page[data-ready]", { timeout: 20000 });
  const err = await page.textContent("#error");
  if (err) fail(`${hash}: error shown: ${err}`);
}
const value = (sel) => page.getAttribute(sel, "data-value");
const shot = (name) => page.screenshot({ path: `${out}/${name}.png`, fullPage: true });

// Overview: totals and the top talkers equal the CLI's.
await open("#/overview?" + want.window);
eq("total bytes", await value("#total-bytes"), want.totals.bytes);
eq("total packets", await value("#total-packets"), want.totals.packets);
eq("total flows", await value("#total-flows"), want.totals.flows);
for (const by of ["src", "dst", "pair", "port"]) {
  const rows = await page.$$eval(`#top-${by} tbody tr`, (trs) => trs.map((tr) => [...tr.children].map((td) => td.getAttribute("data-value") ?? td.textContent)));
  eq(`top ${by} rows`, rows.length, want.top[by].length);
  rows.forEach((r, i) => {
    const w = want.top[by][i];
    if (!w) return;
    const keys = by === "pair" ? [w.src_addr, w.dst_addr] : by === "port" ? [String(w.port)] : [by === "src" ? w.src_addr : w.dst_addr];
    keys.forEach((k, j) => eq(`top ${by} row ${i} key ${j}`, r[j], k));
    const n = by === "pair" || by === "port" ? 2 : 1;
    eq(`top ${by} row ${i} bytes`, r[n], w.bytes);
    eq(`top ${by} row ${i} packets`, r[n + 1], w.packets);
    eq(`top ${by} row ${i} flows`, r[n + 2], w.flows);
  });
}
if (!(await page.$("#chart-bytes .uplot"))) fail("overview: no traffic chart");
if (!(await page.textContent("#health-ifaces")).includes(want.iface)) fail("overview: health does not list the interface");
await shot("overview");

// Flows: sorted by bytes, the first row is the CLI's first record.
const cell = (row, col) =>
  page.$eval(`#flows tbody tr.flow:nth-child(${row})`, (tr, col) => {
    const i = [...tr.closest("table").querySelectorAll("thead th")].findIndex((th) => th.getAttribute("data-col") === col);
    const td = tr.children[i];
    return td.getAttribute("data-value") ?? td.textContent;
  }, col);
await open("#/flows?" + want.window + "&sort=bytes");
eq("flows matched", await page.getAttribute("#flow-info", "data-matched"), want.flows.length);
eq("first flow bytes", await cell(1, "bytes"), want.byBytes.bytes);
eq("first flow packets", await cell(1, "packets"), want.byBytes.packets);
await shot("flows");
// Sorting: by packets, on the header.
await page.click('th[data-col="packets"]');
await page.waitForSelector(".page[data-ready]");
eq("sorted by packets: first", await cell(1, "packets"), want.byPackets.packets);
// Sorting within the page: a column the store has no order for.
await page.click('th[data-col="iface"]');
await page.waitForSelector(".page[data-ready]");
// Paging: the second page starts where the CLI's 101st record is.
await open("#/flows?" + want.window + "&sort=bytes");
const rowsPage1 = await page.$$eval("#flows tbody tr.flow", (t) => t.length);
eq("page 1 rows", rowsPage1, Math.min(100, want.flows.length));
if (want.flows.length > 100) {
  await page.click("#next");
  await page.waitForFunction(() => document.querySelector("#flow-info")?.textContent?.startsWith("101"));
  eq("page 2 first bytes", await cell(1, "bytes"), want.flows101.bytes);
  await page.click("#prev");
  await page.waitForFunction(() => document.querySelector("#flow-info")?.textContent?.startsWith("1–"));
} else fail(`paging untested: only ${want.flows.length} records`);
// Filters: source address and protocol, through the form.
await page.fill('#flow-filters input[name="src"]', want.filter.src);
await page.selectOption('#flow-filters select[name="proto"]', want.filter.proto);
await page.click("#apply");
await page.waitForFunction((n) => document.querySelector("#flow-info")?.getAttribute("data-matched") === String(n), want.filter.matched, { timeout: 10000 })
  .catch(() => fail(`filtered matched: want ${want.filter.matched}`));
// Export: every record of the filter, as the API sent them.
const [dl] = await Promise.all([page.waitForEvent("download"), page.click("#export-json")]);
await dl.saveAs(`${out}/flows.jsonl`);
eq("export JSON lines", readFileSync(`${out}/flows.jsonl`, "utf8") === want.filter.jsonl, true);
const [dlc] = await Promise.all([page.waitForEvent("download"), page.click("#export-csv")]);
await dlc.saveAs(`${out}/flows.csv`);
const csv = readFileSync(`${out}/flows.csv`, "utf8").trim().split("\n");
eq("export CSV lines", csv.length - 1, want.filter.matched);
if (!csv[0].startsWith("first_seen,last_seen,iface")) fail("CSV header: " + csv[0]);
// Live follow shows the newest records.
await page.check("#follow");
await page.waitForTimeout(500);
await page.uncheck("#follow");

// Topology: the endpoints of the pairs.
await open("#/topology?" + want.window);
await page.waitForSelector("#graph canvas");
eq("topology nodes", await page.getAttribute("#topology-info", "data-nodes"), want.nodes);
await shot("topology");

// Latency.
await open("#/latency?since=1h");
await shot("latency");

// Captures, with the token: an on-demand capture of N packets, saved.
await page.goto(base + "/?token=" + encodeURIComponent(want.token) + "#/captures");
await page.waitForSelector(".page[data-ready]");
if (page.url().includes("token=")) fail("the token stayed in the address");
await shot("captures");
await page.fill('#capture-form input[name="filter"]', want.capture.filter);
await page.fill('#capture-form input[name="iface"]', want.capture.iface);
await page.fill('#capture-form input[name="count"]', String(want.capture.count));
await page.fill('#capture-form input[name="duration"]', "30s");
writeFileSync(`${out}/capture-started`, "");
const [cap] = await Promise.all([page.waitForEvent("download", { timeout: 40000 }), page.click('#capture-form button[type="submit"]')]);
await cap.saveAs(`${out}/capture.pcapng`);

// A narrow window: every page fits its width (tables scroll inside).
await page.setViewportSize({ width: 380, height: 800 });
for (const p of ["overview", "flows", "topology", "captures", "latency"]) {
  await open(`#/${p}?since=1h`);
  const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (over > 1) fail(`${p} at 380 px: ${over} px wider than the window`);
  if (p === "flows") await shot("flows-narrow");
}

await browser.close();
for (const e of consoleErrors) fail("console: " + e);
writeFileSync(`${out}/result.json`, JSON.stringify({ failures }, null, 2));
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
