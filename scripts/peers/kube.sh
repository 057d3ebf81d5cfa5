#!/usr/bin/env bash
# Builds the Kubernetes API server and etcd that the Kubernetes enrichment's
# tests run as real peers, from the Go module proxy, into a cache directory
# outside the repository. Idempotent: a complete cache is left alone.
#
#   scripts/peers/kube.sh            # into $LOUPE_KUBE_BIN or the default
#
# LOUPE_KUBE_BIN   cache directory (default /var/cache/loupe/peers/kube-1.34.4)
# KUBE_VERSION     kube-apiserver version (default 1.34.4)
# ETCD_VERSION     etcd version (default 3.6.4; Debian's 3.4 is older than
#                  the API server accepts)
#
# No release binaries are downloaded: both are compiled with the Go on PATH.
# kube-apiserver lives in the k8s.io/kubernetes module, whose go.mod points
# its 31 staging modules (k8s.io/api, k8s.io/apiserver, ...) at directories
# of its own repository; a wrapper module replaces each with the published
# k8s.io/<name> v0.<minor>.<patch>, which is the same code. etcd is a
# three-line main around etcdmain.Main, in a module of its own so that its
# dependencies and the API server's do not constrain each other.
#
# The cold build took 14 minutes here on 2 cores (6 of CPU; the rest is
# fetching some 300 modules), 1.8 GB of memory at its peak; 124 MB result. The directory is complete when it holds the marker file
# .complete, written last, so an interrupted build is redone rather than
# half-used.
set -euo pipefail

version=${KUBE_VERSION:-1.34.4}
etcd_version=${ETCD_VERSION:-3.6.4}
dir=${LOUPE_KUBE_BIN:-/var/cache/loupe/peers/kube-${version}}

if [ -f "$dir/.complete" ]; then
	exit 0
fi
. "$(dirname "$0")/../env.sh"
if ! command -v go >/dev/null; then
	echo "kube.sh: go is missing (scripts/deps.sh run installs it)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wrapper modules are built as they are, whatever the caller's GOFLAGS
# (-mod=vendor, for one, would look for a vendor directory they lack).
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
ldflags="-s -w"
staging=${version#*.} # 34.4: the staging modules are v0.34.4

echo "kube.sh: building kube-apiserver v${version} and etcd v${etcd_version} into ${dir}" >&2
mkdir -p "$dir" "$tmp/apiserver" "$tmp/etcd"

# kube-apiserver: require k8s.io/kubernetes and replace the staging
# modules its go.mod names with their published versions.
(
	cd "$tmp/apiserver"
	go mod init loupe.peers/kube-apiserver >/dev/null 2>&1
	gomod=$(go mod download -json "k8s.io/kubernetes@v${version}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	if [ ! -f "$gomod" ]; then
		echo "kube.sh: no go.mod for k8s.io/kubernetes@v${version}" >&2
		exit 1
	fi
	mods=$(sed -n 's|^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*|\1|p' "$gomod")
	if [ -z "$mods" ]; then
		echo "kube.sh: no staging replacements in $gomod" >&2
		exit 1
	fi
	{
		echo "require k8s.io/kubernetes v${version}"
		echo "replace ("
		for m in $mods; do
			echo "	$m => $m v0.${staging}"
		done
		echo ")"
	} >>go.mod
	version_pkg=k8s.io/component-base/version
	go build -trimpath -o "$dir/kube-apiserver" \
		-ldflags "$ldflags -X $version_pkg.gitVersion=v${version} -X $version_pkg.gitMajor=${version%%.*} -X $version_pkg.gitMinor=${staging%%.*}" \
		k8s.io/kubernetes/cmd/kube-apiserver
) >"$tmp/apiserver.log" 2>&1 || {
	tail -n 50 "$tmp/apiserver.log" >&2
	exit 1
}

(
	cd "$tmp/etcd"
	go mod init loupe.peers/etcd >/dev/null 2>&1
	cat >main.go <<'MAIN'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
MAIN
	go get "go.etcd.io/etcd/server/v3@v${etcd_version}"
	go build -trimpath -ldflags "$ldflags" -o "$dir/etcd" .
) >"$tmp/etcd.log" 2>&1 || {
	tail -n 50 "$tmp/etcd.log" >&2
	exit 1
}

"$dir/kube-apiserver" --version >&2
"$dir/etcd" --version | head -n 1 >&2
touch "$dir/.complete"
echo "kube.sh: $(du -sh "$dir" | cut -f1) in ${dir}" >&2
