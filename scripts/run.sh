#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the agent on this host
# with its embedded store (/var/lib/loupe/flows) and metrics on
# 127.0.0.1:9464. Extra arguments go to `loupe run`. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh run
. scripts/env.sh
./scripts/build.sh bin/loupe
echo "built bin/loupe; in another terminal, 'bin/loupe flows' prints recent flows and 'bin/loupe top' the top talkers" >&2
exec bin/loupe run "$@"
