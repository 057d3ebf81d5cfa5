#!/usr/bin/env bash
# Renders the plain manifests (deploy/manifests/loupe.yaml) from the Helm
# chart (deploy/helm/loupe) with its default values, so that the two never
# drift; with --check, fails if the committed file differs from what the
# chart renders (scripts/check-generated.sh runs it, as CI does). helm is
# built by scripts/peers/helm.sh.
#
#   scripts/manifests.sh           # make manifests
#   scripts/manifests.sh --check   # make check-manifests
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/peers/helm.sh
helm=${LOUPE_HELM_BIN:-/var/cache/loupe/peers/helm-${HELM_VERSION:-3.19.5}}/helm
out=deploy/manifests/loupe.yaml

render() {
	echo "# Rendered from deploy/helm/loupe with its default values by scripts/manifests.sh"
	echo "# (make manifests): edit the chart, not this file. kubectl apply -f $out"
	"$helm" template loupe deploy/helm/loupe --namespace loupe --set namespace.create=true
}

"$helm" lint --quiet deploy/helm/loupe >/dev/null
if [[ ${1:-} == --check ]]; then
	if ! diff -u "$out" <(render); then
		echo "$out differs from what the chart renders: run 'make manifests' and commit" >&2
		exit 1
	fi
	exit 0
fi
mkdir -p "$(dirname "$out")"
render >"$out"
