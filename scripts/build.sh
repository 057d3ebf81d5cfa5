#!/usr/bin/env bash
# Builds the loupe binary (bin/loupe, or the path given) with its version
# and commit stamped in, so that `loupe version` names the build even where
# the toolchain's own VCS stamp is missing (GOFLAGS=-buildvcs=false, a
# source tarball). Every script that builds the agent goes through here.
#
# The version is LOUPE_VERSION if set, else the nearest v* tag (git
# describe), else a Go pseudo-version of the commit
# (v0.0.0-YYYYMMDDhhmmss-<commit>); the commit is LOUPE_COMMIT if set, else
# HEAD's. Outside a git checkout both are left empty and the binary falls
# back to the toolchain's stamp, then to "devel".
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/loupe}
commit=${LOUPE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
version=${LOUPE_VERSION:-}
modified=""
if [[ -n $commit ]]; then
	if [[ -z $version ]]; then
		version=$(git describe --tags --match 'v[0-9]*' 2>/dev/null || true)
	fi
	if [[ -z $version ]]; then
		version="v0.0.0-$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S "$commit")-${commit:0:12}"
	fi
	if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null | head -1) ]]; then
		modified=true
	fi
fi
CGO_ENABLED=0 ${GO:-go} build -trimpath \
	-ldflags "-X main.stampVersion=$version -X main.stampCommit=$commit -X main.stampModified=$modified" \
	-o "$out" ./cmd/loupe
