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
// Screenshots of the window as a user sees it, JPEG: small enough to
// commit (docs/ui), large enough to read.
const shot = (name) => page.screenshot({ path: `${out}/${name}.jpg`, type: "jpeg", quality: 60 });
// What the page showed that only the test's caller can check (against
// `loupe rules list --json`, after the browser is done).
const seen = {};

// parseCSV reads RFC 4180 CSV: quoted fields may hold commas, quotes
// (doubled) and new lines.
function parseCSV(text) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n") { row.push(field); rows.push(row); row = []; field = ""; }
    else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows;
}

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
    eq(`top ${by} row ${i} share`, r[n + 2], `${((100 * w.bytes) / want.totals.bytes).toFixed(1)} %`);
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
// Sorting, on the headers: every column sorts in the store, so the first
// row is the CLI's first record of the same --sort.
const sortBy = async (col) => {
  await page.click(`th[data-col="${col}"]`);
  await page.waitForSelector(`th.active[data-col="${col}"]`, { timeout: 10000 });
  await page.waitForSelector(".page[data-ready]");
};
await sortBy("packets");
eq("sorted by packets: first", await cell(1, "packets"), want.byPackets.packets);
await sortBy("rtt");
eq("sorted by rtt: first rtt", await cell(1, "rtt"), want.byRTT.rtt_max_ns);
eq("sorted by rtt: first source", (await cell(1, "source")).includes(want.byRTT.src_addr), true);
await sortBy("retrans");
eq("sorted by retransmits: first", await cell(1, "retrans"), want.byRetransmits.retransmits);
await sortBy("drops");
eq("sorted by drops: first", await cell(1, "drops"), want.byDrops.drop_packets);
await sortBy("dns");
eq("sorted by dns latency: first", (await cell(1, "dns")).startsWith(want.byDNS.dns_qname), true);
await sortBy("accuracy");
eq("sorted by accuracy: first", await cell(1, "accuracy"), want.byAccuracy.accuracy ?? "exact");
await sortBy("iface");
eq("sorted by iface: first", await cell(1, "iface"), want.byIface.iface);
await sortBy("dir");
eq("sorted by direction: first", await cell(1, "dir"), want.byDirection.direction);
// The filters on what was measured, through the form: the store's count
// of every matching record, as the CLI's.
const matched = (n, what) =>
  page.waitForFunction((n) => document.querySelector("#flow-info")?.getAttribute("data-matched") === String(n), n, { timeout: 10000 })
    .catch(async () => fail(`${what}: matched ${await page.getAttribute("#flow-info", "data-matched")}, want ${n}`));
for (const [name, v, n] of [["has", "drops", want.measured.drops], ["has", "dns", want.measured.dns], ["accuracy", "estimated", want.measured.estimated]]) {
  await open("#/flows?" + want.window);
  await page.selectOption(`#flow-filters select[name="${name}"]`, v);
  await page.click("#apply");
  await matched(n, `${name}=${v}`);
}
await open("#/flows?" + want.window + "&min-rtt=500us");
await matched(want.measured.minRTT, "min-rtt=500us");
// Kubernetes names: the namespace filter, and each row's names as the
// records carry them (namespace/workload), in the table's order.
await open("#/flows?" + want.window + "&namespace=" + want.k8s.namespace);
await matched(want.k8s.matched, "namespace filter");
eq("k8s names", JSON.stringify(await page.$$eval("#flows tbody tr.flow .k8s", (els) => els.map((e) => e.textContent))), JSON.stringify(want.k8s.names));
await shot("flows-k8s");
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
// The CSV holds the records of the JSON lines, one row each, in order,
// every column the JSON's field of its name.
const csv = parseCSV(readFileSync(`${out}/flows.csv`, "utf8"));
const jsonRecs = want.filter.jsonl.trim().split("\n").map((l) => JSON.parse(l));
eq("export CSV rows", csv.length - 1, want.filter.matched);
if (!csv[0].join(",").startsWith("first_seen,last_seen,iface")) fail("CSV header: " + csv[0]);
jsonRecs.forEach((r, i) => {
  const row = csv[i + 1] ?? [];
  csv[0].forEach((f, j) => {
    const v = r[f];
    const exp = v === undefined || v === null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
    if (row[j] !== exp) fail(`CSV row ${i + 1} ${f}: got ${row[j]}, want ${exp}`);
  });
});
// Live follow shows the newest records.
await page.check("#follow");
await page.waitForTimeout(500);
await page.uncheck("#follow");

// Topology: the endpoints of the pairs.
await open("#/topology?" + want.window);
await page.waitForSelector("#graph canvas");
eq("topology nodes", await page.getAttribute("#topology-info", "data-nodes"), want.nodes);
await shot("topology");

// Latency: a row per record of `loupe latency --json`, with its trace id
// and its hops, each of the latency the record says.
await open("#/latency?since=1h");
eq("latency rows", await page.$$eval("#latency tbody tr", (t) => t.length), want.latency.length);
for (const r of want.latency) {
  const sel = `#latency tbody tr[data-trace="${r.trace_id}"]`;
  if (!(await page.$(sel))) {
    fail(`latency: no row of trace ${r.trace_id}`);
    continue;
  }
  eq(`latency ${r.trace_id} link`, await page.textContent(`${sel} td:nth-child(2) a`), r.trace_id);
  const hops = await page.$$eval(`${sel} .seg`, (els) => els.map((e) => e.getAttribute("data-ns")));
  eq(`latency ${r.trace_id} hops`, JSON.stringify(hops), JSON.stringify(r.hops.map((x) => String(x.latency_ns))));
}
await shot("latency");

// Captures, with the token: an on-demand capture of N packets, saved.
await page.goto(base + "/?token=" + encodeURIComponent(want.token) + "#/captures");
await page.waitForSelector(".page[data-ready]");
if (page.url().includes("token=")) fail("the token stayed in the address");
// A rule added on the page is in force: the page lists it, and the test
// checks `loupe rules list --json` once the browser is done.
await page.fill('#add-rule input[name="v"]', want.rule);
await page.click('#add-rule button[type="submit"]');
await page.waitForFunction((id) => [...document.querySelectorAll("#rules tbody tr")].some((tr) => tr.children[0]?.textContent === id), want.ruleID, { timeout: 10000 })
  .catch(() => fail(`rule ${want.ruleID}: not listed after adding it`));
seen.rule = await page.$$eval("#rules tbody tr", (trs, id) => trs.filter((tr) => tr.children[0]?.textContent === id).map((tr) => tr.children[1].textContent)[0] ?? "", want.ruleID);
await page.waitForSelector(".page[data-ready]");
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
writeFileSync(`${out}/result.json`, JSON.stringify({ failures, seen }, null, 2));
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
