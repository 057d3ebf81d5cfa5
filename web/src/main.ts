// The UI's shell: a page per route of the hash (#/flows?src=...), the
// token field, and an error line. Each page reads the agent's API only.
import { setToken, status, token } from "./api";
import { h } from "./format";
import { captures } from "./pages/captures";
import { flows } from "./pages/flows";
import { latency } from "./pages/latency";
import { overview } from "./pages/overview";
import { topology } from "./pages/topology";

const pages = ["overview", "flows", "topology", "captures", "latency"];

function route(): { page: string; params: URLSearchParams } {
  const [path, q] = location.hash.replace(/^#\/?/, "").split("?");
  return { page: pages.includes(path) ? path : "overview", params: new URLSearchParams(q ?? "") };
}

function go(params: URLSearchParams, page = route().page): void {
  const q = params.toString();
  location.hash = `#/${page}${q ? "?" + q : ""}`;
}

async function render(): Promise<void> {
  const { page, params } = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("data-page") === page);
  const main = document.getElementById("main")!;
  const err = document.getElementById("error")!;
  err.textContent = "";
  const root = h("div", { class: "page", id: "page-" + page });
  main.replaceChildren(root);
  root.setAttribute("data-loading", "");
  try {
    switch (page) {
      case "flows": await flows(root, params, go); break;
      case "topology": await topology(root, params, go); break;
      case "captures": await captures(root, await status(), () => void render()); break;
      case "latency": await latency(root, params, go); break;
      default: await overview(root, params);
    }
  } catch (e) {
    err.textContent = e instanceof Error ? e.message : String(e);
  } finally {
    root.removeAttribute("data-loading");
    root.setAttribute("data-ready", "");
  }
}

function shell(): void {
  // A token given in the address (?token=...) is kept for the session and
  // taken out of the address at once.
  const u = new URL(location.href);
  if (u.searchParams.has("token")) {
    setToken(u.searchParams.get("token")!);
    u.searchParams.delete("token");
    history.replaceState(null, "", u.toString());
  }
  const tok = h("input", { type: "password", id: "token", placeholder: "token", size: 12, value: token(), autocomplete: "off" }) as HTMLInputElement;
  tok.addEventListener("change", () => {
    setToken(tok.value);
    void render();
  });
  document.body.replaceChildren(
    h("header", {}, h("strong", {}, "loupe"),
      h("nav", {}, ...pages.map((p) => h("a", { href: "#/" + p, "data-page": p }, p[0].toUpperCase() + p.slice(1)))),
      h("label", { class: "tok", title: "the agent's token (control.token_file), for downloads, captures and changes" }, tok)),
    h("div", { id: "error", role: "alert" }),
    h("main", { id: "main" }),
  );
  window.addEventListener("hashchange", () => void render());
  void render();
}

shell();
