#!/usr/bin/env bash
# Runs Loupe's benchmarks and writes their results to bench/RESULTS.md.
# Benchmarks, not tests: run as root on a machine prepared with
# `./scripts/deps.sh bench`. The whole suite takes about 20 minutes here.
#
#   bench/run.sh             every benchmark, in this order:
#   bench/run.sh NAME...     only these:
#     iperf     iperf3 TCP throughput: untraced, empty hook, agent
#     bpfstats  BPF run time per packet (bpf_stats) under a 64-byte UDP flood
#     monitor   monitoring rate under small packets: Loupe, tcpdump, pmacctd
#     tables    per-CPU versus shared flow tables: pps, ns/packet, memory
#     rss       agent RSS with 100 000 active flows
#     store     the store query benchmark (go run ./bench/store)
#     export    records/s each exporter sustains on one core, CPU per 10 000/s
#     capture   the thesis's tables 5.1-5.3 with triggered capture: iperf3,
#               nginx + h2load at 0 % and 100 % errors, BPF ns/packet, and
#               packets/s written to pcapng against tcpdump
#     rules     measurement rules: BPF ns per packet with 0, 10 and 10 000
#               rules, measured, skipped, unmatched, cached and not,
#               beside an earlier commit (BENCH_RULES_BASE)
#     signals   kernel signals: BPF ns per tracepoint event under iperf3, with
#               random drops, and under a flood of dropped frames; iperf3
#               with the agent, flows alone against flows and signals
#     designs   the exact table, the sketch and the off-path ring buffer
#               (the selective-measurement seed's Tables 1-3): ns/packet,
#               kernel memory, accuracy against the trace, agent CPU
#     tunnels   the parse's tunnel step: BPF ns per packet, tunnelled or not,
#               against the commit before it; instruction counts
#     k8s       Kubernetes names: informer memory and ns per lookup with
#               5 000 pods and 1 000 services on a real API server
#     latency   per-hop latency against tcpdump's time stamps of the same
#               segments, and HTTP request latency with and without it
#     ui        the web UI: each page's first view in chromium over the
#               store benchmark's 10 M records, cold and warm
#
# Knobs (environment): BENCH_IPERF_ROUNDS (5), BENCH_IPERF_SECONDS (10),
# BENCH_ROUNDS (3, bpfstats and tables), BENCH_RSS_SECONDS (30),
# BENCH_SIGNALS_ROUNDS (3), BENCH_SIGNALS_SECONDS (8), BENCH_DESIGNS_ROUNDS (3),
# BENCH_DESIGNS_WORKLOADS ("seed 10x 1M"),
# BENCH_EXPORT_RECORDS (2000000), BENCH_CAPTURE_* (see bench/capture.sh),
# BENCH_UI_RUNS (5), BENCH_UI_PAGES, BENCH_UI_RECORDS, BENCH_UI_HOPS (see bench/ui.sh),
# BENCH_BASE (the commit bpfstats compares with, built from a temporary git
# worktree; default 0bf4c56, the last one before the capability seam; empty:
# not compared), BENCH_KEEP (a path: a benchmark's work directory, its
# traces, captures and logs, is copied there before it is removed).
#
# Each benchmark runs as its own process with its own namespaces (unique
# names) and an EXIT trap that stops what it started and deletes them; a
# failed benchmark does not stop the others, but makes run.sh exit 1.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
cd "$ROOT"
. scripts/env.sh

ALL=(iperf bpfstats monitor tables rss store export capture rules signals designs tunnels k8s latency ui)

usage() {
	echo "usage: bench/run.sh [${ALL[*]}]..." >&2
	exit 2
}

names=("$@")
((${#names[@]})) || names=("${ALL[@]}")
for n in "${names[@]}"; do
	[[ " ${ALL[*]} " == *" $n "* ]] || usage
done

if [[ -z ${BENCH_BIN_DIR:-} ]]; then
	# The top level: check the machine, build once, run each benchmark.
	if ((EUID != 0)); then
		echo "bench/run.sh: needs root (network namespaces, BPF, bpf_stats)" >&2
		exit 1
	fi
	missing=()
	for t in go ip iperf3 tcpreplay tcpdump pmacctd python3 taskset timeout; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	if ((${#missing[@]})); then
		echo "bench/run.sh: missing ${missing[*]}: run ./scripts/deps.sh bench" >&2
		exit 1
	fi
	BENCH_BIN_DIR=$(mktemp -d /tmp/loupe-bench-bin.XXXXXX)
	trap 'rm -rf "$BENCH_BIN_DIR"' EXIT
	export BENCH_BIN_DIR
	# The commit the binaries are built from, for the results.
	BENCH_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "none")
	if [[ -n $(git status --porcelain -- . ':!bench' 2>/dev/null | head -1) ]]; then
		BENCH_COMMIT="$BENCH_COMMIT + uncommitted changes"
	fi
	export BENCH_COMMIT
	echo "bench: building $BENCH_COMMIT into $BENCH_BIN_DIR" >&2
	./scripts/build.sh "$BENCH_BIN_DIR/loupe"
	# The agent as it was before the change being judged (bpfstats runs
	# it beside this one): BENCH_BASE, by default the last commit before
	# the capability seam; empty to skip. Built only when bpfstats runs.
	BENCH_BASE=${BENCH_BASE-0bf4c56}
	[[ " ${names[*]} " == *" bpfstats "* ]] || BENCH_BASE=""
	if [[ -n $BENCH_BASE ]]; then
		base_tree=$(mktemp -d /tmp/loupe-bench-base.XXXXXX)
		git worktree add -q --detach "$base_tree" "$BENCH_BASE"
		(cd "$base_tree" && ./scripts/build.sh "$BENCH_BIN_DIR/loupe-base")
		git worktree remove --force "$base_tree"
		BENCH_BASE=$(git rev-parse --short "$BENCH_BASE")
	fi
	export BENCH_BASE
	CGO_ENABLED=0 go build -trimpath -o "$BENCH_BIN_DIR/" ./bench/cmd/...
	# A benchmark runs in the background so that a signal to run.sh can be
	# passed on to it (as SIGTERM: background processes of a script ignore
	# SIGINT), and its EXIT trap cleans up.
	child=""
	stop_child() {
		echo "bench: interrupted: stopping ${child:-nothing}" >&2
		[[ -z $child ]] || kill -TERM "$child" 2>/dev/null || true
		[[ -z $child ]] || wait "$child" 2>/dev/null || true
		exit 130
	}
	trap stop_child INT TERM
	failed=()
	start=$SECONDS
	for n in "${names[@]}"; do
		echo "bench: === $n ===" >&2
		t0=$SECONDS
		"$BENCH_DIR/run.sh" "$n" &
		child=$!
		if ! wait "$child"; then
			echo "bench: $n FAILED" >&2
			failed+=("$n")
		fi
		child=""
		echo "bench: $n took $((SECONDS - t0)) s" >&2
	done
	echo "bench: all done in $((SECONDS - start)) s; results in bench/RESULTS.md" >&2
	if ((${#failed[@]})); then
		echo "bench: failed: ${failed[*]}" >&2
		exit 1
	fi
	exit 0
fi

# One benchmark, in its own process.
((${#names[@]} == 1)) || usage
BIN=$BENCH_BIN_DIR
RUN_ID=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
WORK=$(mktemp -d "/tmp/loupe-bench-${names[0]}.XXXXXX")
. "$BENCH_DIR/lib.sh"
trap 'rc=$?; trap - EXIT INT TERM; bench_cleanup; [[ -z ${BENCH_KEEP:-} ]] || cp -a "$WORK" "$BENCH_KEEP"; rm -rf "$WORK"; exit $rc' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
. "$BENCH_DIR/${names[0]}.sh"
"bench_${names[0]}"
