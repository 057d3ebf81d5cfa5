#!/usr/bin/env bash
# Builds the helm binary that lints and renders the chart under
# deploy/helm/loupe (its tests, and make manifests), from the Go module
# proxy, into a cache directory outside the repository. Idempotent: a
# complete cache is left alone.
#
#   scripts/peers/helm.sh            # into $LOUPE_HELM_BIN or the default
#
# LOUPE_HELM_BIN   cache directory (default /var/cache/loupe/peers/helm-3.19.5)
# HELM_VERSION     helm version (default 3.19.5)
#
# No release binary is downloaded: `go install` compiles helm.sh/helm/v3 with
# the Go on PATH, in module mode outside this repository, so that helm's
# dependencies never enter Loupe's go.mod. The directory is complete when it
# holds the marker file .complete, written last, so an interrupted build is
# redone rather than half-used.
set -euo pipefail

version=${HELM_VERSION:-3.19.5}
dir=${LOUPE_HELM_BIN:-/var/cache/loupe/peers/helm-${version}}

if [ -f "$dir/.complete" ]; then
	exit 0
fi
. "$(dirname "$0")/../env.sh"
if ! command -v go >/dev/null; then
	echo "helm.sh: go is missing (scripts/deps.sh run installs it)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Built as helm's own go.mod says, whatever the caller's GOFLAGS; the
# version is stamped as helm's release builds stamp it.
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
echo "helm.sh: building helm v${version} into ${dir}" >&2
mkdir -p "$dir"
(
	cd "$tmp"
	GOBIN="$dir" go install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v${version}" \
		"helm.sh/helm/v3/cmd/helm@v${version}"
) >"$tmp/build.log" 2>&1 || {
	tail -n 50 "$tmp/build.log" >&2
	exit 1
}
"$dir/helm" version --short >&2
touch "$dir/.complete"
echo "helm.sh: $(du -sh "$dir" | cut -f1) in ${dir}" >&2
