import { getJSON, query } from "../api";
import { duration, endpoint, h, table } from "../format";

interface Hop { from_iface: string; to_iface: string; direction: string; latency_ns: number; from_node?: string; to_node?: string }
interface Rec { trace_id: string; span_id: string; src_addr: string; dst_addr: string; src_port: number; dst_port: number; seq: number; hops: Hop[]; time: string; kind: string }

const hopName = (x: Hop) => `${x.from_node ? x.from_node + ":" : ""}${x.from_iface} → ${x.to_node ? x.to_node + ":" : ""}${x.to_iface} (${x.direction})`;

// histogram is one hop's latencies in power-of-two buckets of
// nanoseconds, drawn as bars.
function histogram(name: string, ns: number[]): HTMLElement {
  const buckets = new Map<number, number>();
  for (const v of ns) {
    const b = Math.max(0, Math.ceil(Math.log2(Math.max(v, 1))));
    buckets.set(b, (buckets.get(b) ?? 0) + 1);
  }
  const keys = [...buckets.keys()].sort((a, b) => a - b);
  const max = Math.max(...buckets.values());
  const sorted = [...ns].sort((a, b) => a - b);
  const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  return h("section", { class: "card" }, h("h3", {}, name),
    h("p", {}, `${ns.length} samples, p50 ${duration(q(0.5))}, p99 ${duration(q(0.99))}, max ${duration(sorted[sorted.length - 1])}`),
    h("div", { class: "hist" }, ...keys.map((k) => h("div", { class: "hrow" }, h("span", { class: "hlabel" }, "≤ " + duration(2 ** k)),
      h("span", { class: "hbar", style: `width:${((100 * buckets.get(k)!) / max).toFixed(1)}%` }), h("span", {}, String(buckets.get(k)))))));
}

// timeline draws a request's hops one after the other, widths to scale.
function timeline(r: Rec): HTMLElement {
  const total = r.hops.reduce((s, x) => s + Math.max(x.latency_ns, 0), 0) || 1;
  return h("div", { class: "timeline" }, ...r.hops.map((x) => h("span", { class: "seg " + x.direction, "data-ns": x.latency_ns, "data-hop": hopName(x), style: `width:${Math.max(2, (100 * Math.max(x.latency_ns, 0)) / total).toFixed(1)}%`,
    title: `${hopName(x)}: ${duration(x.latency_ns)}` }, duration(x.latency_ns))));
}

export async function latency(root: HTMLElement, p: URLSearchParams, go: (p: URLSearchParams) => void): Promise<void> {
  const since = p.get("since") ?? "1h";
  const trace = p.get("trace") ?? "";
  const form = h("form", { class: "filters" }, h("label", {}, "since ", h("input", { name: "since", value: since, size: 6 })),
    h("label", {}, "trace id ", h("input", { name: "trace", value: trace, size: 34 })), h("button", { type: "submit" }, "Apply")) as HTMLFormElement;
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) n.set(k, String(v));
    go(n);
  });
  root.append(form);
  const recs = await getJSON<Rec[]>("/api/v1/latency" + query({ since, trace: trace || undefined }));
  if (!recs.length) {
    root.append(h("p", { class: "empty", id: "latency-empty" }, "No per-hop latency records in this window (the agent stores them with --latency)."));
    return;
  }
  const byHop = new Map<string, number[]>();
  for (const r of recs) {
    for (const x of r.hops) {
      const k = hopName(x);
      const v = byHop.get(k);
      if (v) v.push(x.latency_ns);
      else byHop.set(k, [x.latency_ns]);
    }
  }
  root.append(h("div", { class: "grid" }, ...[...byHop].map(([n, v]) => histogram(n, v))));
  const rows = recs.slice(-500).reverse().map((r) => {
    const id = h("a", { href: `#/latency?since=${since}&trace=${r.trace_id}` }, r.trace_id || "-");
    return h("tr", { "data-trace": r.trace_id }, h("td", {}, new Date(r.time).toLocaleTimeString("en-GB")), h("td", {}, id), h("td", {}, r.kind),
      h("td", {}, endpoint(r.src_addr, r.src_port)), h("td", {}, endpoint(r.dst_addr, r.dst_port)), h("td", { class: "wide" }, timeline(r)));
  });
  root.append(h("section", { class: "card wide" }, h("h3", {}, "Requests and their hops"), table(["time", "trace id", "kind", "source", "destination", "hops"], rows, "latency")));
}
