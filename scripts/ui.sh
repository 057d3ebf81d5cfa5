#!/usr/bin/env bash
# Builds the web UI (web/) into internal/ui/dist, which the agent embeds:
# the modules exactly as web/package-lock.json pins them (npm ci), never
# a browser (playwright-core downloads none, and is told not to). The
# sources are type-checked first (tsc --noEmit): esbuild only strips the
# types, so without this a type error would build.
set -euo pipefail
cd "$(dirname "$0")/../web"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi
npm run --silent check
npm run --silent build
