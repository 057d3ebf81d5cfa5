import { APIError, getJSON, raw, send, Status, token } from "../api";
import { bytes, h, table } from "../format";

interface Trigger { name: string; trigger: string; event: string; sample: number; filter?: string }
interface Rule { rule: { id: string; text: string }; packets: number; bytes: number }
interface Trace { trace: string; trigger: string; status: number; time: string; src: string; dst: string; iface: string; request?: string }
interface CaptureList { traces: Trace[]; files: { name: string; size: number; time: string }[]; dir?: string }

function save(name: string, blob: Blob): void {
  const a = h("a", { href: URL.createObjectURL(blob), download: name }) as HTMLAnchorElement;
  document.body.append(a);
  a.click();
  a.remove();
}

function needToken(): HTMLElement | null {
  return token() ? null : h("p", { class: "note" }, "Downloads, captures and changes need the agent's token (control.token_file): enter it at the top right.");
}

// form builds a one-line form whose submit runs act with the input's
// value, showing the API's refusal beside it.
function lineForm(id: string, placeholder: string, label: string, act: (v: string) => Promise<void>): HTMLElement {
  const input = h("input", { name: "v", placeholder, size: 40 }) as HTMLInputElement;
  const msg = h("span", { class: "error" });
  const f = h("form", { id, class: "filters" }, input, h("button", { type: "submit" }, label), msg) as HTMLFormElement;
  f.addEventListener("submit", async (e) => {
    e.preventDefault();
    msg.textContent = "";
    try {
      await act(input.value);
      input.value = "";
    } catch (err) {
      msg.textContent = err instanceof Error ? err.message : String(err);
    }
  });
  return f;
}

export async function captures(root: HTMLElement, st: Status, reload: () => void): Promise<void> {
  const hasCapture = st.capabilities.some((c) => c.name === "capture" && c.enabled);
  const hasRules = st.capabilities.some((c) => c.name === "rules" && c.enabled);
  root.append(needToken() ?? "");
  if (hasCapture) {
    const [trig, list] = await Promise.all([getJSON<{ triggers: Trigger[] }>("/api/v1/triggers"), getJSON<CaptureList>("/api/v1/captures")]);
    const trows = trig.triggers.map((t) => {
      const del = h("button", { type: "button", class: "small" }, "delete");
      del.addEventListener("click", async () => {
        await send("DELETE", "/api/v1/triggers/" + encodeURIComponent(t.name));
        reload();
      });
      return h("tr", {}, h("td", {}, t.name), h("td", {}, h("code", {}, t.trigger)), h("td", {}, del));
    });
    root.append(h("section", { class: "card wide" }, h("h3", {}, "Triggers"), table(["name", "trigger", ""], trows, "triggers"),
      lineForm("add-trigger", "http.status=500-599 sample=1/10 filter=tcp port 80", "Add trigger", async (v) => {
        await send("POST", "/api/v1/triggers", { trigger: v });
        reload();
      })));
    const traceRows = list.traces.map((t) => h("tr", {}, h("td", {}, new Date(t.time).toLocaleTimeString("en-GB")), h("td", {}, h("code", {}, t.trace)),
      h("td", {}, t.trigger), h("td", {}, t.status ? String(t.status) : "tcp.rst"), h("td", {}, t.src), h("td", {}, t.dst), h("td", {}, t.iface), h("td", {}, t.request ?? "")));
    const fileRows = list.files.map((f) => {
      const dl = h("button", { type: "button", class: "small" }, "download");
      dl.addEventListener("click", async () => save(f.name, await (await raw("/api/v1/captures/files/" + encodeURIComponent(f.name))).blob()));
      return h("tr", {}, h("td", {}, f.name), h("td", { class: "num" }, bytes(f.size)), h("td", {}, dl));
    });
    root.append(h("section", { class: "card wide" }, h("h3", {}, "Triggered connections"),
      table(["time", "trace", "trigger", "status", "source", "destination", "iface", "request"], traceRows, "traces"),
      h("h4", {}, list.dir ? `Capture files in ${list.dir}` : "No capture directory (capture.dir): triggered packets go to followers only"),
      table(["file", "size", ""], fileRows, "capture-files")));
    // An on-demand capture: the pcapng streams back until its count or
    // duration ends it, then it is offered as a file.
    const cf = h("form", { id: "capture-form", class: "filters" }) as HTMLFormElement;
    const inp = (name: string, ph: string, v = "") => h("label", {}, name + " ", h("input", { name, placeholder: ph, value: v, size: name === "filter" ? 30 : 8 }));
    const state = h("span", { id: "capture-state" });
    cf.append(inp("filter", "tcp port 80"), inp("iface", "veth*"), inp("count", "packets", "100"), inp("duration", "10s", "10s"),
      h("button", { type: "submit" }, "Start capture"), state);
    cf.addEventListener("submit", async (e) => {
      e.preventDefault();
      const fd = new FormData(cf);
      const body: Record<string, unknown> = { filter: String(fd.get("filter") ?? "") };
      if (fd.get("iface")) body.ifaces = [String(fd.get("iface"))];
      if (fd.get("count")) body.count = Number(fd.get("count"));
      if (fd.get("duration")) body.duration = String(fd.get("duration"));
      state.textContent = "capturing…";
      try {
        const resp = await raw("/api/v1/capture", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        const blob = await resp.blob();
        state.textContent = `done: ${bytes(blob.size)}`;
        state.setAttribute("data-bytes", String(blob.size));
        save("loupe-capture.pcapng", blob);
      } catch (err) {
        state.textContent = err instanceof APIError ? err.message : String(err);
      }
    });
    root.append(h("section", { class: "card wide" }, h("h3", {}, "Start a capture"), cf));
  } else {
    root.append(h("p", { class: "note" }, "The capture capability is off (loupe run --capture)."));
  }
  if (hasRules) {
    const rules = await getJSON<{ rules: Rule[] }>("/api/v1/rules");
    const rows = rules.rules.map((r) => {
      const del = h("button", { type: "button", class: "small" }, "delete");
      del.addEventListener("click", async () => {
        await send("DELETE", "/api/v1/rules/" + encodeURIComponent(r.rule.id));
        reload();
      });
      return h("tr", {}, h("td", {}, r.rule.id), h("td", {}, h("code", {}, r.rule.text)), h("td", { class: "num" }, String(r.packets)), h("td", { class: "num" }, bytes(r.bytes)), h("td", {}, del));
    });
    root.append(h("section", { class: "card wide" }, h("h3", {}, "Rules"), table(["id", "rule", "packets", "bytes", ""], rows, "rules"),
      lineForm("add-rule", "dst=10.0.0.0/8 dport=873 skip", "Add rule", async (v) => {
        await send("POST", "/api/v1/rules", { rule: v });
        reload();
      })));
  }
}
