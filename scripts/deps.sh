#!/usr/bin/env bash
# Installs what Loupe needs on Debian 12 / Ubuntu 22.04+, as root. Idempotent.
#   deps.sh run        Go toolchain (to build the agent)
#   deps.sh test       + iproute2, ping, capsh, systemd-analyze, nftables, nginx, tcpdump, dnsmasq: what the test suite drives,
#                      and the real collectors the exporter tests talk to:
#                      tshark, nfdump, pmacct, Prometheus, a JDK and the
#                      Apache Kafka jars (scripts/peers/kafka.sh), and
#                      kube-apiserver and etcd built from the Go module
#                      proxy (scripts/peers/kube.sh; up to 15 minutes cold),
#                      and helm for the chart's tests (scripts/peers/helm.sh,
#                      from the Go module proxy; about 2 minutes cold)
#   deps.sh generate   + clang-19, llvm-19, bpftool, protoc, node and npm: regenerate BPF
#                      objects and the protobuf schema's Go code, and build the web UI
#   deps.sh bench      + iperf3, tcpreplay, tcpdump, pmacct, perf, python3,
#                      nginx, h2load (nghttp2-client), DuckDB from PyPI
#                      (the store benchmark's comparison),
#                      a JDK and the Kafka jars, kube-apiserver and etcd
set -euo pipefail
cd "$(dirname "$0")/.."

purpose=${1:-run}
packages=(ca-certificates curl unzip make git)
case "$purpose" in
run) ;;
test) packages+=(iproute2 iputils-ping libcap2-bin procps systemd nftables tshark tcpdump nginx-light dnsmasq-base nfdump pmacct prometheus openjdk-17-jre-headless maven chromium nodejs) ;;
generate) packages+=(clang-19 llvm-19 bpftool protobuf-compiler nodejs) ;;
bench) packages+=(iproute2 iputils-ping iperf3 tcpreplay tcpdump pmacct linux-perf python3 python3-pip procps nginx-light nghttp2-client openjdk-17-jre-headless maven) ;;
*)
	echo "usage: $0 run|test|generate|bench" >&2
	exit 2
	;;
esac

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# tshark asks whether non-root users may capture: they may not.
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Go: the version go.mod names. Debian's own Go is too old, so when the Go on
# PATH is missing or older, fetch the official toolchain from the Go module
# proxy (the same zip `GOTOOLCHAIN` downloads) into /usr/local/go.
want=$(awk '/^go /{print $2; exit}' go.mod)
have=$(go env GOVERSION 2>/dev/null | sed 's/^go//' || true)
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" != "$2" ]; }
if [ -z "$have" ] || older "$have" "$want"; then
	arch=$(dpkg --print-architecture)
	url="https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go${want}.linux-${arch}.zip"
	echo "deps: installing Go ${want} from ${url}" >&2
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	curl -fsSL -o "$tmp/go.zip" "$url"
	unzip -q "$tmp/go.zip" -d "$tmp"
	rm -rf /usr/local/go
	mv "$tmp/golang.org/toolchain@v0.0.1-go${want}.linux-${arch}" /usr/local/go
	chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
	echo "deps: Go installed in /usr/local/go; add /usr/local/go/bin to PATH" >&2
fi

# The Kafka broker the exporter tests and benchmarks start (jars from Maven
# Central), and the Kubernetes API server and etcd the enrichment's tests
# start (built with the Go above): cached outside the repository. helm
# lints and renders the chart (deploy/helm/loupe) in the tests.
case "$purpose" in
test | bench)
	scripts/peers/kafka.sh
	scripts/peers/kube.sh
	;;
esac
case "$purpose" in
test) scripts/peers/helm.sh ;;
esac

# The web UI's modules, from the lockfile (the browser tests drive Debian's
# chromium with playwright-core, which must never download a browser).
# NodeSource's nodejs carries npm; Debian's needs its npm package.
case "$purpose" in
test | generate)
	if ! command -v npm >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
	fi
	(cd web && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
	;;
esac

# DuckDB, which the store benchmark runs on the same records (pinned: its
# times are in bench/store/RESULTS.md). Debian's Python is externally
# managed; the package is one self-contained wheel.
duckdb_version=1.4.2
case "$purpose" in
bench)
	if ! python3 -c "import duckdb, sys; sys.exit(duckdb.__version__ != '$duckdb_version')" 2>/dev/null; then
		echo "deps: installing duckdb $duckdb_version from PyPI" >&2
		python3 -m pip install -q --break-system-packages "duckdb==$duckdb_version"
	fi
	;;
esac
