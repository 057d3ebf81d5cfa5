import uPlot from "uplot";
import { getJSON, query, status, Status } from "../api";
import { bytes, count, h, num, proto, table } from "../format";

interface Traffic {
  since: string;
  until: string;
  step_seconds: number;
  series: { iface: string; direction: string; points: [number, number, number][] }[];
  protocols: { proto: number; name: string; bytes: number; packets: number; flows: number }[];
  totals: { bytes: number; packets: number; flows: number };
}

interface TopRow {
  by: string;
  src_addr?: string;
  dst_addr?: string;
  port?: number;
  proto?: number;
  bytes: number;
  packets: number;
}

interface Metric {
  name: string;
  type: string;
  samples: { labels?: Record<string, string>; value: number }[];
}

export const ranges = ["5m", "15m", "1h", "6h", "24h"];

// chart draws one uPlot chart of the series' column col (1: bytes, 2:
// packets), each series aligned on the union of their buckets.
function chart(el: HTMLElement, tr: Traffic, col: 1 | 2, title: string): void {
  const xs = [...new Set(tr.series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const data: (number | null)[][] = [xs];
  for (const s of tr.series) {
    const ys: (number | null)[] = xs.map(() => 0);
    for (const p of s.points) ys[index.get(p[0])!] = p[col] / tr.step_seconds;
    data.push(ys);
  }
  const colors = ["#2a6fdb", "#d9534f", "#3c9d5d", "#e39d2d", "#8a5fd1", "#1aa1a1", "#c2579b", "#777"];
  const width = Math.max(280, Math.min(el.clientWidth || 600, 900));
  const opts: uPlot.Options = {
    title,
    width,
    height: 220,
    series: [{}, ...tr.series.map((s, i) => ({ label: `${s.iface} ${s.direction}`, stroke: colors[i % colors.length], width: 1.5 }))],
    axes: [{}, { values: (_u, vals) => vals.map((v) => (col === 1 ? bytes(v) + "/s" : count(v) + "/s")), size: 80 }],
  };
  new uPlot(opts, data as uPlot.AlignedData, el);
}

// topTable shows a grouping's top rows: bytes, packets and their share of
// the window's bytes. No flow count: the store need not count distinct
// flows for it (flows=false), most of a top's time over millions of
// records; the Flows page and `loupe top` give it.
function topTable(by: string, rows: TopRow[], total: number): HTMLElement {
  const head = by === "pair" ? ["source", "destination"] : by === "port" ? ["port", "proto"] : [by === "src" ? "source" : "destination"];
  const body = rows.map((r) => {
    const keys =
      by === "pair"
        ? [r.src_addr!, r.dst_addr!]
        : by === "port"
          ? [String(r.port), proto(r.proto!)]
          : [(by === "src" ? r.src_addr : r.dst_addr)!];
    // data-value keeps the address as the API gave it ("" for non-IP).
    return h("tr", {}, ...keys.map((k) => h("td", { "data-value": k }, k || "non-IP")), num(r.bytes, bytes(r.bytes)), num(r.packets),
      h("td", { class: "num" }, total ? `${((100 * r.bytes) / total).toFixed(1)} %` : "-"));
  });
  return h("section", { class: "card" }, h("h3", {}, `Top ${by === "pair" ? "pairs" : by === "port" ? "ports" : by === "src" ? "sources" : "destinations"}`),
    table([...head, "bytes", "packets", "share"], body, `top-${by}`));
}

function health(st: Status, metrics: Metric[]): HTMLElement {
  const m = (name: string) => metrics.find((f) => f.name === name);
  const rows: HTMLElement[] = [];
  rows.push(h("tr", {}, h("td", {}, "agent"), h("td", {}, `${st.state}, up ${Math.round(st.uptime_seconds)} s`)));
  rows.push(h("tr", {}, h("td", {}, "interfaces"), h("td", { id: "health-ifaces" }, `${st.interfaces.attached} (${st.interfaces.mode}): ${st.interfaces.names.join(", ")}`)));
  const dp = st.datapath;
  rows.push(h("tr", {}, h("td", {}, "datapath"), h("td", {}, `${dp.tables} tables, flow budget ${dp.flow_budget}, ${dp.cpus} CPUs`)));
  const flows = st.capabilities.find((c) => c.name === "flows");
  if (flows?.detail) {
    const fill = Number(flows.detail.flows_last_eviction ?? 0);
    // flow_capacity counts every CPU's budget with per-CPU tables.
    const budget = Number(flows.detail.flow_capacity ?? flows.detail.flow_budget ?? dp.flow_budget ?? 0);
    rows.push(h("tr", {}, h("td", {}, "table fill"), h("td", {}, `${count(fill)} of ${count(budget)} flows at the last eviction` + (budget ? ` (${((100 * fill) / budget).toFixed(1)} %)` : ""))));
  }
  for (const c of st.capabilities) {
    rows.push(h("tr", {}, h("td", {}, c.name), h("td", {}, c.enabled ? c.state : "off")));
  }
  const events = m("loupe_datapath_events_total")?.samples.filter((s) => s.value > 0) ?? [];
  const lost = m("loupe_dropped_packets_total")?.samples[0]?.value ?? 0;
  const drops = h("tbody", {}, h("tr", {}, h("td", {}, "ring buffer full (lost)"), num(lost)),
    ...events.map((s) => h("tr", {}, h("td", {}, s.labels?.event ?? ""), num(s.value))));
  const exporters = metrics.filter((f) => f.name.startsWith("loupe_export") || f.name.startsWith("loupe_delivery"));
  const exp = exporters.flatMap((f) =>
    f.samples.map((s) => h("tr", {}, h("td", {}, f.name.replace(/^loupe_/, "")), h("td", {}, Object.values(s.labels ?? {}).join(" ")), num(s.value))),
  );
  return h("section", { class: "card wide", id: "health" }, h("h3", {}, "Agent health"),
    h("div", { class: "scroll" }, h("table", {}, h("tbody", {}, ...rows))),
    h("h4", {}, "Drops and anomalies by reason"), h("div", { class: "scroll" }, h("table", { id: "health-drops" }, drops)),
    exp.length ? h("h4", {}, "Exporters") : null,
    exp.length ? h("div", { class: "scroll" }, h("table", { id: "health-exporters" }, h("tbody", {}, ...exp))) : null);
}

export async function overview(root: HTMLElement, params: URLSearchParams): Promise<void> {
  // A range is the last D, or a fixed window (since and until as RFC 3339
  // times, as the CLI takes them) given in the address.
  const since = params.get("since") ?? "1h";
  const until = params.get("until") ?? undefined;
  const custom = !ranges.includes(since) || until !== undefined;
  const select = h("select", { id: "range" }, ...ranges.map((r) => h("option", { value: r, selected: !custom && r === since }, `last ${r}`)),
    custom ? h("option", { value: "", selected: true }, `${since} to ${until ?? "now"}`) : null) as HTMLSelectElement;
  select.addEventListener("change", () => select.value && (location.hash = "#/overview?since=" + select.value));
  root.append(h("div", { class: "toolbar" }, h("label", {}, "Range ", select)));
  // The four top tables in one request: the store reads the window once
  // for the sources, destinations and pairs.
  const groupings = ["src", "dst", "pair", "port"];
  const [tr, st, metrics, topRows] = await Promise.all([
    getJSON<Traffic>("/api/v1/traffic" + query({ since, until })),
    status(),
    getJSON<{ metrics: Metric[] }>("/api/v1/metrics"),
    getJSON<TopRow[]>("/api/v1/top" + query({ by: groupings.join(","), since, until, n: 10, flows: "false" })),
  ]);
  const totals = h("section", { class: "card wide totals" },
    h("div", {}, h("span", { class: "big", id: "total-bytes", "data-value": tr.totals.bytes }, bytes(tr.totals.bytes)), " bytes"),
    h("div", {}, h("span", { class: "big", id: "total-packets", "data-value": tr.totals.packets }, count(tr.totals.packets)), " packets"),
    h("div", {}, h("span", { class: "big", id: "total-flows", "data-value": tr.totals.flows }, count(tr.totals.flows)), " flow records"));
  const bytesChart = h("div", { class: "chart", id: "chart-bytes" });
  const packetsChart = h("div", { class: "chart", id: "chart-packets" });
  const protoRows = tr.protocols.map((p) => {
    const share = tr.totals.bytes ? (100 * p.bytes) / tr.totals.bytes : 0;
    return h("tr", {}, h("td", {}, p.name), num(p.bytes, bytes(p.bytes)), num(p.packets), num(p.flows),
      h("td", { class: "bar" }, h("span", { style: `width:${share.toFixed(1)}%` }), ` ${share.toFixed(1)} %`));
  });
  root.append(
    totals,
    h("section", { class: "card wide" }, h("h3", {}, "Traffic by interface and direction"), bytesChart, packetsChart),
    h("section", { class: "card" }, h("h3", {}, "Protocol mix"), table(["proto", "bytes", "packets", "flows", "share"], protoRows, "protocols")),
    ...groupings.map((by) => topTable(by, topRows.filter((r) => r.by === by), tr.totals.bytes)),
    health(st, metrics.metrics),
  );
  if (tr.series.length) {
    chart(bytesChart, tr, 1, "bytes/s");
    chart(packetsChart, tr, 2, "packets/s");
  } else {
    bytesChart.append(h("p", { class: "empty" }, "No traffic in this range."));
  }
}
