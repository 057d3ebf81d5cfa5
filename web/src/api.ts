// The agent's API, the only thing the pages read (docs/api.md). The
// token of control.token_file is kept for the tab's session only and sent
// as a bearer header, which no page of another origin can make the
// browser send.

const tokenKey = "loupe.token";

export function token(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

export function setToken(t: string): void {
  if (t) sessionStorage.setItem(tokenKey, t.trim());
  else sessionStorage.removeItem(tokenKey);
}

export class APIError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  const t = token();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

async function check(resp: Response): Promise<Response> {
  if (resp.ok) return resp;
  let msg = resp.statusText;
  try {
    msg = (await resp.json()).error ?? msg;
  } catch {
    /* not JSON */
  }
  throw new APIError(resp.status, msg);
}

export async function raw(path: string, init: RequestInit = {}): Promise<Response> {
  const h = headers(init.headers as Record<string, string>);
  return check(await fetch(path, { ...init, headers: h }));
}

export async function getJSON<T>(path: string): Promise<T> {
  return (await raw(path, { headers: { Accept: "application/json" } })).json();
}

export async function send<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)["Content-Type"] = "application/json";
  }
  return (await raw(path, init)).json();
}

export function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

// A flow record as GET /api/v1/flows returns it: the names of `loupe
// flows --json`, optional fields left out when not measured.
export interface FlowRecord {
  iface: string;
  direction: string;
  proto: number;
  src_addr: string;
  dst_addr: string;
  src_port?: number;
  dst_port?: number;
  packets: number;
  bytes: number;
  tcp_flags?: number;
  accuracy?: string;
  rtt_min_ns?: number;
  rtt_max_ns?: number;
  rtt_last_ns?: number;
  handshake_rtt_ns?: number;
  retransmits?: number;
  drop_packets?: number;
  drop_reasons?: string[] | string;
  dns_qname?: string;
  dns_rcode?: string | number;
  dns_latency_ns?: number;
  first_seen: string;
  last_seen: string;
  [k: string]: unknown;
}

export interface Status {
  version: string;
  state: string;
  uptime_seconds: number;
  capabilities: { name: string; enabled: boolean; state: string; detail?: Record<string, unknown> }[];
  interfaces: { attached: number; names: string[]; mode: string };
  datapath: Record<string, unknown>;
}

export async function status(): Promise<Status> {
  return getJSON<Status>("/api/v1/status");
}

export function enabled(st: Status, name: string): boolean {
  return st.capabilities.some((c) => c.name === name && c.enabled);
}
