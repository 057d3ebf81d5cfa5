#!/usr/bin/env bash
# Regenerates the BPF objects (pinned clang) and the protobuf schema's Go
# code (Debian's protoc, protoc-gen-go pinned in go.mod), and renders the
# plain manifests from the Helm chart, and fails if they differ from what
# is committed: committed generated files must be exactly what the
# committed sources produce.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh generate
. scripts/env.sh
# protoc writes its version into the generated file: only the version the
# committed file was made with (Debian 12's) can reproduce it.
want_protoc=$(sed -n 's|^// \tprotoc  *v||p' internal/export/kafka/flowpb/flow.pb.go)
have_protoc=$(protoc --version | awk '{print $2}')
if [ "$want_protoc" != "$have_protoc" ]; then
	echo "protoc $have_protoc cannot reproduce flow.pb.go (made with protoc $want_protoc, Debian 12's)" >&2
	exit 1
fi
go generate ./internal/datapath/ ./internal/export/kafka/
if ! git diff --exit-code --stat -- internal/datapath/ internal/export/kafka/flowpb/; then
	echo "generated files differ from the committed ones: run 'make generate' and commit" >&2
	exit 1
fi
if [ -n "$(git status --porcelain -- internal/datapath/ internal/export/kafka/flowpb/)" ]; then
	echo "generation created files that are not committed:" >&2
	git status --porcelain -- internal/datapath/ internal/export/kafka/flowpb/ >&2
	exit 1
fi
# The plain manifests are rendered from the Helm chart, likewise.
./scripts/manifests.sh --check
# The web UI's build output: rebuilt from web/ with the locked modules.
./scripts/ui.sh
if ! git diff --exit-code --stat -- internal/ui/dist/ || [ -n "$(git status --porcelain -- internal/ui/dist/)" ]; then
	echo "internal/ui/dist differs from what web/ builds: run 'make ui' and commit" >&2
	git status --porcelain -- internal/ui/dist/ >&2
	exit 1
fi
