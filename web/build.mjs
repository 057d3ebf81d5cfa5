// Builds the UI into ../internal/ui/dist, which the agent embeds: one
// script, one style sheet and the page, minified, with no time stamps or
// absolute paths, so that a rebuild from the same lockfile gives the same
// bytes (CI rebuilds and fails on a difference).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";

const out = new URL("../internal/ui/dist/", import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: ["src/main.ts"],
  bundle: true,
  minify: true,
  format: "iife",
  target: ["chrome110", "firefox110", "safari16"],
  outfile: out + "app.js",
  legalComments: "eof",
  logLevel: "warning",
});
const css = readFileSync("node_modules/uplot/dist/uPlot.min.css", "utf8") + "\n" + readFileSync("src/style.css", "utf8");
writeFileSync(out + "app.css", css);
copyFileSync("src/index.html", out + "index.html");
