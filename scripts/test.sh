#!/usr/bin/env bash
# Runs the whole test suite, as root: unit tests (with the race detector),
# BPF parser tests on the real programs, and the end-to-end tests in network
# namespaces. Tests that need root fail instead of skipping here.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh test
. scripts/env.sh
export CI_REQUIRE_PRIVILEGED=1
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '_bpfel\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt needed: $unformatted" >&2
	exit 1
fi
go test -race -count=1 -timeout 20m ./...
