import cytoscape from "cytoscape";
import { getJSON, query } from "../api";
import { bytes, h } from "../format";

interface Topology {
  nodes: { addr: string; bytes: number }[];
  edges: { src_addr: string; dst_addr: string; bytes: number; packets: number }[];
  truncated: boolean;
}

// Past this many endpoints a layout of addresses is unreadable: they are
// grouped by subnet (/24, /64) unless the user asks otherwise.
const groupPast = 150;

export function subnet(addr: string): string {
  if (addr.includes(":")) {
    const parts = addr.split(":").slice(0, 4);
    return parts.join(":") + "::/64";
  }
  const p = addr.split(".");
  return p.length === 4 ? `${p[0]}.${p[1]}.${p[2]}.0/24` : addr;
}

export async function topology(root: HTMLElement, p: URLSearchParams, go: (p: URLSearchParams, page?: string) => void): Promise<void> {
  const since = p.get("since") ?? "1h";
  const form = h("form", { class: "filters" }) as HTMLFormElement;
  const field = (name: string, label: string, def = "") => h("label", {}, label + " ", h("input", { name, value: p.get(name) ?? def, size: 10 }));
  const group = h("select", { name: "group" }, ...["auto", "address", "subnet"].map((g) => h("option", { value: g, selected: (p.get("group") ?? "auto") === g }, g)));
  form.append(field("since", "since", "1h"), field("until", "until"), field("src", "src"), field("dst", "dst"), field("port", "port"), field("proto", "proto"),
    field("n", "edges", "300"), h("label", {}, "group ", group), h("button", { type: "submit" }, "Apply"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) n.set(k, String(v));
    go(n);
  });
  const info = h("p", { id: "topology-info" });
  const canvas = h("div", { id: "graph" });
  root.append(form, info, canvas);
  // The graph shows bytes, not flows: the store need not count them
  // (flows=false), which is most of the query's time over many records.
  const topo = await getJSON<Topology>("/api/v1/topology" + query({ since, until: p.get("until") ?? undefined, src: p.get("src") ?? undefined, dst: p.get("dst") ?? undefined,
    port: p.get("port") ?? undefined, proto: p.get("proto") ?? undefined, n: p.get("n") ?? undefined, flows: "false" }));
  const mode = p.get("group") ?? "auto";
  const grouped = mode === "subnet" || (mode === "auto" && topo.nodes.length > groupPast);
  // A record that is not IP (ARP, LLDP) has no address.
  const name = (a: string) => (a === "" ? "non-IP" : grouped ? subnet(a) : a);
  const nodes = new Map<string, number>();
  const edges = new Map<string, { src: string; dst: string; bytes: number }>();
  for (const e of topo.edges) {
    const s = name(e.src_addr), d = name(e.dst_addr);
    nodes.set(s, (nodes.get(s) ?? 0) + e.bytes);
    nodes.set(d, (nodes.get(d) ?? 0) + e.bytes);
    const k = s + " " + d;
    const x = edges.get(k) ?? { src: s, dst: d, bytes: 0 };
    x.bytes += e.bytes;
    edges.set(k, x);
  }
  info.textContent = `${nodes.size} ${grouped ? "subnets" : "endpoints"}, ${edges.size} conversations` +
    (topo.truncated ? ` (the heaviest ${topo.edges.length} pairs; raise "edges" for more)` : "") + ". Click a node or an edge for its flows.";
  info.setAttribute("data-nodes", String(nodes.size));
  if (!nodes.size) return;
  const maxB = Math.max(...[...edges.values()].map((e) => e.bytes), 1);
  const width = (b: number) => 1 + 7 * Math.sqrt(b / maxB);
  const cy = cytoscape({
    container: canvas,
    elements: [
      ...[...nodes].map(([id, b]) => ({ data: { id, label: id, title: bytes(b) } })),
      ...[...edges.values()].map((e, i) => ({ data: { id: "e" + i, source: e.src, target: e.dst, w: width(e.bytes), label: bytes(e.bytes), src: e.src, dst: e.dst } })),
    ],
    style: [
      { selector: "node", style: { label: "data(label)", "font-size": 10, "background-color": "#2a6fdb", width: 14, height: 14, color: "#222" } },
      { selector: "edge", style: { width: "data(w)", "line-color": "#9ab", "target-arrow-color": "#9ab", "target-arrow-shape": "triangle", "curve-style": "bezier", "arrow-scale": 0.6 } },
    ],
    // CoSE cools faster than its default (0.99): some 140 iterations
    // instead of 700, each over every pair of nodes, which took 0.4 s for
    // 111 nodes; the drawing is much the same.
    layout: (nodes.size > 400 ? { name: "grid" } : { name: "cose", animate: false, randomize: false, coolingFactor: 0.95 }) as cytoscape.LayoutOptions,
    wheelSensitivity: 0.3,
  });
  // A node's or an edge's flows, in the flows table (a subnet is a CIDR
  // already, which the filters take as they are).
  const cidr = (x: string) => (x === "non-IP" ? "" : x);
  cy.on("tap", "node", (ev) => {
    if (ev.target.id() !== "non-IP") go(new URLSearchParams({ since, src: cidr(ev.target.id()) }), "flows");
  });
  cy.on("tap", "edge", (ev) => {
    const d = ev.target.data();
    const n = new URLSearchParams({ since });
    if (cidr(d.src)) n.set("src", cidr(d.src));
    if (cidr(d.dst)) n.set("dst", cidr(d.dst));
    go(n, "flows");
  });
  (window as unknown as { loupeGraph: unknown }).loupeGraph = cy;
}
