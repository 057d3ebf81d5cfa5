import { FlowRecord, query, raw } from "../api";
import { bytes, count, duration, endpoint, h, k8sName, num, proto, time } from "../format";

// The filters the API takes (those of `loupe flows`): the store applies
// every one to every record of the window, so a page is a page of the
// whole answer.
const serverFilters = ["since", "until", "src", "dst", "port", "proto", "iface", "direction", "namespace", "workload", "min-rtt", "has", "accuracy"];
const pageSize = 100;

// Columns: the name shown, the store's sort key (`loupe flows --sort`),
// whether that order is largest first (counters, times, signals) or
// ascending, and the cell.
interface Column {
  name: string;
  sort: string;
  desc: boolean;
  cell: (r: FlowRecord) => HTMLElement;
}

const text = (s: string | undefined) => h("td", {}, s ?? "");
const opt = (v: number | undefined, f: (n: number) => string = count) => (v === undefined ? h("td", { class: "num" }, "") : num(v, f(v)));

const columns: Column[] = [
  { name: "last seen", sort: "last_seen", desc: true, cell: (r) => h("td", { title: r.last_seen }, time(r.last_seen)) },
  { name: "first seen", sort: "first_seen", desc: true, cell: (r) => h("td", { title: r.first_seen }, time(r.first_seen)) },
  { name: "iface", sort: "iface", desc: false, cell: (r) => text(r.iface) },
  { name: "dir", sort: "direction", desc: false, cell: (r) => text(r.direction) },
  { name: "proto", sort: "proto", desc: false, cell: (r) => text(proto(r.proto)) },
  { name: "source", sort: "src", desc: false, cell: (r) => h("td", {}, endpoint(r.src_addr, r.src_port), pod(r, "src")) },
  { name: "destination", sort: "dst", desc: false, cell: (r) => h("td", {}, endpoint(r.dst_addr, r.dst_port), pod(r, "dst")) },
  { name: "packets", sort: "packets", desc: true, cell: (r) => num(r.packets) },
  { name: "bytes", sort: "bytes", desc: true, cell: (r) => num(r.bytes, bytes(r.bytes)) },
  { name: "rtt", sort: "rtt", desc: true, cell: rtt },
  { name: "retrans", sort: "retransmits", desc: true, cell: (r) => opt(r.retransmits) },
  { name: "drops", sort: "drops", desc: true, cell: (r) => opt(r.drop_packets) },
  { name: "dns", sort: "dns_latency", desc: true, cell: (r) => text(r.dns_qname ? `${r.dns_qname} ${r.dns_rcode ?? ""} ${duration(r.dns_latency_ns)}` : "") },
  { name: "accuracy", sort: "accuracy", desc: false, cell: (r) => text(r.accuracy ?? "exact") },
];

// rtt is the largest smoothed RTT (what the column sorts by), with the
// last and smallest, and the handshake's, in its title.
function rtt(r: FlowRecord): HTMLElement {
  const td = opt(r.rtt_max_ns, duration);
  const parts: string[] = [];
  if (r.rtt_last_ns !== undefined) parts.push(`last ${duration(r.rtt_last_ns)}`);
  if (r.rtt_min_ns !== undefined) parts.push(`min ${duration(r.rtt_min_ns)}`);
  if (r.handshake_rtt_ns !== undefined) parts.push(`handshake ${duration(r.handshake_rtt_ns)}`);
  if (parts.length) td.title = parts.join(", ");
  return td;
}

function pod(r: FlowRecord, side: "src" | "dst"): HTMLElement | null {
  const n = k8sName(r, side);
  return n ? h("div", { class: "k8s" }, n) : null;
}

function apiParams(p: URLSearchParams, extra: Record<string, string | number | undefined> = {}): string {
  const o: Record<string, string | number | undefined> = {};
  for (const k of serverFilters) o[k] = p.get(k) ?? undefined;
  o.since ??= "1h";
  return query({ ...o, ...extra });
}

async function fetchLines(path: string): Promise<{ recs: FlowRecord[]; lines: string[]; matched: number; next: string }> {
  const resp = await raw(path);
  const body = await resp.text();
  const lines = body.split("\n").filter((l) => l);
  const recs = lines.map((l) => JSON.parse(l) as FlowRecord);
  return { recs, lines, matched: Number(resp.headers.get("Loupe-Matched") ?? recs.length), next: resp.headers.get("Loupe-Next-Cursor") ?? "" };
}

function download(name: string, type: string, data: string): void {
  const a = h("a", { href: URL.createObjectURL(new Blob([data], { type })), download: name }) as HTMLAnchorElement;
  document.body.append(a);
  a.click();
  a.remove();
}

const csvFields = ["first_seen", "last_seen", "iface", "direction", "proto", "src_addr", "src_port", "dst_addr", "dst_port", "packets", "bytes",
  "accuracy", "rtt_last_ns", "handshake_rtt_ns", "retransmits", "drop_packets", "dns_qname", "dns_rcode", "dns_latency_ns",
  "src_namespace", "src_workload", "src_pod", "dst_namespace", "dst_workload", "dst_pod"];

export function toCSV(recs: FlowRecord[]): string {
  const esc = (v: unknown) => {
    const s = v === undefined || v === null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [csvFields.join(","), ...recs.map((r) => csvFields.map((f) => esc(r[f])).join(","))].join("\n") + "\n";
}

export async function flows(root: HTMLElement, p: URLSearchParams, go: (p: URLSearchParams) => void): Promise<void> {
  const form = h("form", { class: "filters", id: "flow-filters" }) as HTMLFormElement;
  const field = (name: string, label: string, placeholder = "") =>
    h("label", {}, label + " ", h("input", { name, value: p.get(name) ?? (name === "since" ? "1h" : ""), placeholder, size: 12 }));
  const choice = (name: string, label: string, values: string[]) =>
    h("label", {}, label + " ", h("select", { name }, ...values.map((v) => h("option", { value: v, selected: (p.get(name) ?? "") === v }, v || "any"))));
  form.append(
    field("since", "since", "1h or RFC 3339"), field("until", "until", "now"), field("src", "src", "CIDR"), field("dst", "dst", "CIDR"),
    field("port", "port"), choice("proto", "proto", ["", "tcp", "udp", "icmp", "icmpv6", "sctp"]), field("iface", "iface", "glob"),
    choice("direction", "direction", ["", "ingress", "egress"]), field("namespace", "namespace"), field("workload", "workload", "[ns/]name"),
    field("min-rtt", "rtt ≥", "500us, 20ms"), choice("has", "with", ["", "rtt", "handshake_rtt", "retransmits", "drops", "dns"]),
    choice("accuracy", "accuracy", ["", "exact", "decoded", "estimated"]),
    h("button", { type: "submit", id: "apply" }, "Apply"),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) n.set(k, String(v));
    if (p.get("sort")) n.set("sort", p.get("sort")!);
    go(n);
  });
  const follow = h("input", { type: "checkbox", id: "follow" }) as HTMLInputElement;
  const exportJSON = h("button", { id: "export-json", type: "button" }, "Export JSON lines");
  const exportCSV = h("button", { id: "export-csv", type: "button" }, "Export CSV");
  const prev = h("button", { id: "prev", type: "button" }, "◀ Previous") as HTMLButtonElement;
  const next = h("button", { id: "next", type: "button" }, "Next ▶") as HTMLButtonElement;
  const info = h("span", { id: "flow-info" });
  root.append(form, h("div", { class: "toolbar" }, h("label", {}, follow, " live follow"), exportJSON, exportCSV, prev, next, info));
  const out = h("div", { class: "scroll" });
  root.append(out);

  const sort = p.get("sort") ?? "last_seen";
  const cursors: string[] = [""];
  let page = 0;

  const render = (recs: FlowRecord[], matched: number) => {
    const head = columns.map((c) => {
      const active = c.sort === sort;
      const th = h("th", { class: "sortable" + (active ? " active" : ""), "data-col": c.name, "data-sort": c.sort,
        title: `sort every matching record by ${c.sort}, ${c.desc ? "largest or newest first" : "ascending"}` },
        c.name + (active ? (c.desc ? " ▼" : " ▲") : ""));
      th.addEventListener("click", () => {
        const n = new URLSearchParams(p);
        n.set("sort", c.sort);
        go(n);
      });
      return th;
    });
    const rows = recs.map((r) => {
      const tr = h("tr", { class: "flow" }, ...columns.map((c) => c.cell(r)));
      tr.addEventListener("click", () => {
        const d = tr.nextElementSibling;
        if (d?.classList.contains("detail")) d.remove();
        else tr.after(h("tr", { class: "detail" }, h("td", { colspan: columns.length }, h("pre", {}, JSON.stringify(r, null, 2)))));
      });
      return tr;
    });
    out.replaceChildren(h("table", { id: "flows" }, h("thead", {}, h("tr", {}, ...head)), h("tbody", {}, ...rows)));
    const first = page * pageSize;
    info.textContent = matched ? `${count(first + 1)}–${count(first + recs.length)} of ${count(matched)} records` : "no records matched";
    info.setAttribute("data-matched", String(matched));
    prev.disabled = page === 0;
    next.disabled = !cursors[page + 1];
  };

  const load = async () => {
    const { recs, matched, next: nc } = await fetchLines("/api/v1/flows" + apiParams(p, { sort, limit: pageSize, cursor: cursors[page] || undefined }));
    cursors[page + 1] = nc;
    render(recs, matched);
  };
  prev.addEventListener("click", () => { page--; void load(); });
  next.addEventListener("click", () => { page++; void load(); });

  let timer = 0;
  follow.addEventListener("change", () => {
    window.clearInterval(timer);
    if (!follow.checked) return;
    page = 0;
    // Live: the newest records, read again every two seconds.
    const tick = async () => {
      const { recs, matched } = await fetchLines("/api/v1/flows" + apiParams(p, { sort: "last_seen", limit: pageSize }));
      if (document.body.contains(out)) render(recs, matched);
      else window.clearInterval(timer);
    };
    void tick();
    timer = window.setInterval(tick, 2000);
  });

  // Every matching record, not the page: the lines as the API sent
  // them (exact to the last digit), in the table's order.
  const all = () => fetchLines("/api/v1/flows" + apiParams(p, { sort }));
  exportJSON.addEventListener("click", async () => {
    const { lines } = await all();
    download("flows.jsonl", "application/x-ndjson", lines.map((l) => l + "\n").join(""));
  });
  exportCSV.addEventListener("click", async () => download("flows.csv", "text/csv", toCSV((await all()).recs)));
  await load();
}
