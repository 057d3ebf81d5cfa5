// Numbers and names as the CLI prints them, with the exact value kept in
// the element's data-value for anyone (and the tests) to read.

export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function count(n: number): string {
  return n.toLocaleString("en-US");
}

export function duration(ns: number | undefined): string {
  if (ns === undefined) return "";
  if (ns < 1e3) return `${ns}ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(1)}µs`;
  if (ns < 1e9) return `${(ns / 1e6).toFixed(2)}ms`;
  return `${(ns / 1e9).toFixed(2)}s`;
}

const protos: Record<number, string> = { 1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp", 47: "gre", 50: "esp" };

export function proto(p: number): string {
  return protos[p] ?? String(p);
}

export function endpoint(addr: string, port?: number): string {
  if (port === undefined) return addr;
  return addr.includes(":") ? `[${addr}]:${port}` : `${addr}:${port}`;
}

export function time(s: string): string {
  const d = new Date(s);
  return isNaN(d.getTime()) ? s : d.toLocaleTimeString("en-GB", { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

// el builds an element: h("td", {class: "num"}, "12").
export function h(tag: string, attrs: Record<string, string | number | boolean | undefined> = {}, ...children: (Node | string | null | undefined)[]): HTMLElement {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (k.startsWith("on")) continue;
    e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return e;
}

// num is a right-aligned cell showing text with the exact value in data-value.
export function num(value: number, text?: string): HTMLElement {
  return h("td", { class: "num", "data-value": value }, text ?? count(value));
}

// The Kubernetes names a record carries when the agent knows them
// (src_pod, src_namespace, src_workload, ...): "namespace/workload" or the pod.
export function k8sName(r: Record<string, unknown>, side: "src" | "dst"): string {
  const ns = r[`${side}_namespace`] as string | undefined;
  const name = (r[`${side}_workload`] ?? r[`${side}_pod`] ?? r[`${side}_service`]) as string | undefined;
  if (!name) return "";
  return ns ? `${ns}/${name}` : name;
}

export function table(head: string[], rows: HTMLElement[], id?: string): HTMLElement {
  return h("div", { class: "scroll" }, h("table", { id }, h("thead", {}, h("tr", {}, ...head.map((c) => h("th", {}, c)))), h("tbody", {}, ...rows)));
}
