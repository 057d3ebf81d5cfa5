#!/usr/bin/env bash
# Builds the loupe binary (bin/loupe, or the path given) with its version
# and commit stamped in, so that `loupe version` names the build even where
# the toolchain's own VCS stamp is missing (GOFLAGS=-buildvcs=false, a
# source tarball). Every script that builds the agent goes through here.
#
# The version and commit are scripts/version.sh's. Outside a git checkout
# both are empty and the binary falls back to the toolchain's stamp, then
# to "devel".
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/loupe}
. scripts/version.sh
CGO_ENABLED=0 ${GO:-go} build -trimpath \
	-ldflags "-X main.stampVersion=$version -X main.stampCommit=$commit -X main.stampModified=$modified" \
	-o "$out" ./cmd/loupe
