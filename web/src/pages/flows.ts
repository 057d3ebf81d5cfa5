import { FlowRecord, query, raw } from "../api";
import { bytes, count, duration, endpoint, h, k8sName, num, proto, time } from "../format";

// The filters the API takes (those of `loupe flows`), and those the page
// applies to the records it holds (fields the store has no filter for).
const serverFilters = ["since", "until", "src", "dst", "port", "proto", "iface", "direction"];
const pageSize = 100;

// Columns: the name shown, the server's sort key if the store sorts by
// it (else the page sorts what it holds), and the cell.
interface Column {
  name: string;
  sort?: string;
  key: (r: FlowRecord) => number | string;
  cell: (r: FlowRecord) => HTMLElement;
}

const text = (s: string | undefined) => h("td", {}, s ?? "");
const opt = (v: number | undefined, f: (n: number) => string = count) => (v === undefined ? h("td", { class: "num" }, "") : num(v, f(v)));

const columns: Column[] = [
  { name: "last seen", sort: "last_seen", key: (r) => r.last_seen, cell: (r) => h("td", { title: r.last_seen }, time(r.last_seen)) },
  { name: "first seen", sort: "first_seen", key: (r) => r.first_seen, cell: (r) => h("td", { title: r.first_seen }, time(r.first_seen)) },
  { name: "iface", key: (r) => r.iface, cell: (r) => text(r.iface) },
  { name: "dir", key: (r) => r.direction, cell: (r) => text(r.direction) },
  { name: "proto", sort: "proto", key: (r) => r.proto, cell: (r) => text(proto(r.proto)) },
  { name: "source", sort: "src", key: (r) => r.src_addr, cell: (r) => h("td", {}, endpoint(r.src_addr, r.src_port), pod(r, "src")) },
  { name: "destination", sort: "dst", key: (r) => r.dst_addr, cell: (r) => h("td", {}, endpoint(r.dst_addr, r.dst_port), pod(r, "dst")) },
  { name: "packets", sort: "packets", key: (r) => r.packets, cell: (r) => num(r.packets) },
  { name: "bytes", sort: "bytes", key: (r) => r.bytes, cell: (r) => num(r.bytes, bytes(r.bytes)) },
  { name: "rtt", key: (r) => r.rtt_last_ns ?? r.handshake_rtt_ns ?? -1, cell: (r) => opt(r.rtt_last_ns ?? r.handshake_rtt_ns, duration) },
  { name: "retrans", key: (r) => r.retransmits ?? -1, cell: (r) => opt(r.retransmits) },
  { name: "drops", key: (r) => r.drop_packets ?? -1, cell: (r) => opt(r.drop_packets) },
  { name: "dns", key: (r) => r.dns_qname ?? "", cell: (r) => text(r.dns_qname ? `${r.dns_qname} ${r.dns_rcode ?? ""} ${duration(r.dns_latency_ns)}` : "") },
  { name: "accuracy", key: (r) => r.accuracy ?? "exact", cell: (r) => text(r.accuracy ?? "exact") },
];

function pod(r: FlowRecord, side: "src" | "dst"): HTMLElement | null {
  const n = k8sName(r, side);
  return n ? h("div", { class: "k8s" }, n) : null;
}

// pageFilter keeps the records that have the fields asked for.
function pageFilter(recs: FlowRecord[], p: URLSearchParams): FlowRecord[] {
  const has = p.get("has");
  const acc = p.get("accuracy");
  return recs.filter((r) => {
    if (acc && (r.accuracy ?? "exact") !== acc) return false;
    switch (has) {
      case "rtt": return r.rtt_last_ns !== undefined || r.handshake_rtt_ns !== undefined;
      case "retransmits": return (r.retransmits ?? 0) > 0;
      case "drops": return (r.drop_packets ?? 0) > 0;
      case "dns": return r.dns_qname !== undefined;
    }
    return true;
  });
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
    choice("direction", "direction", ["", "ingress", "egress"]), choice("has", "with", ["", "rtt", "retransmits", "drops", "dns"]),
    choice("accuracy", "accuracy", ["", "exact", "estimated"]),
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
  const pageSort = p.get("psort"); // a column the store cannot sort by: sorted on the page
  const desc = p.get("order") !== "asc";
  const cursors: string[] = [""];
  let page = 0;

  const render = (recs: FlowRecord[], matched: number) => {
    let shown = pageFilter(recs, p);
    if (pageSort) {
      const col = columns.find((c) => c.name === pageSort)!;
      shown = [...shown].sort((a, b) => {
        const x = col.key(a), y = col.key(b);
        const c = x < y ? -1 : x > y ? 1 : 0;
        return desc ? -c : c;
      });
    }
    const head = columns.map((c) => {
      const active = c.sort ? !pageSort && c.sort === sort : pageSort === c.name;
      const th = h("th", { class: "sortable" + (active ? " active" : ""), "data-col": c.name, title: c.sort ? "sorted by the store" : "sorted within this page" },
        c.name + (active ? (c.sort || desc ? " ▼" : " ▲") : ""));
      th.addEventListener("click", () => {
        const n = new URLSearchParams(p);
        n.delete("psort");
        n.delete("order");
        if (c.sort) n.set("sort", c.sort);
        else {
          n.set("psort", c.name);
          if (pageSort === c.name && desc) n.set("order", "asc");
        }
        go(n);
      });
      return th;
    });
    const rows = shown.map((r) => {
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
    info.textContent = matched ? `${count(first + 1)}–${count(first + recs.length)} of ${count(matched)} records` + (shown.length !== recs.length ? `, ${shown.length} shown` : "") : "no records matched";
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
  // them (exact to the last digit), less those the page's filters drop.
  const all = async () => {
    const { recs, lines } = await fetchLines("/api/v1/flows" + apiParams(p, { sort }));
    const keep = new Set(pageFilter(recs, p));
    return { recs: recs.filter((r) => keep.has(r)), lines: lines.filter((_, i) => keep.has(recs[i])) };
  };
  exportJSON.addEventListener("click", async () => {
    const { lines } = await all();
    download("flows.jsonl", "application/x-ndjson", lines.map((l) => l + "\n").join(""));
  });
  exportCSV.addEventListener("click", async () => download("flows.csv", "text/csv", toCSV((await all()).recs)));
  await load();
}
