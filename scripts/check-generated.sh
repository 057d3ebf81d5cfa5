#!/usr/bin/env bash
# Regenerates the BPF objects with the pinned clang and fails if they differ
# from what is committed: the committed objects must be exactly what the
# committed C sources produce.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh generate
. scripts/env.sh
go generate ./internal/datapath/
if ! git diff --exit-code --stat -- internal/datapath/; then
	echo "generated BPF objects differ from the committed ones: run 'make generate' and commit" >&2
	exit 1
fi
