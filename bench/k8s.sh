# Benchmark 10: Kubernetes names (the Kubernetes issue's targets: under
# 100 MB of agent memory for the cache and under 1 µs per lookup, with
# 5 000 pods and 1 000 services). BenchmarkResolver in internal/k8s starts a
# real etcd and kube-apiserver (scripts/peers/kube.sh builds them), writes
# 5 000 pods (5 per ReplicaSet, over 50 nodes), 1 000 services with their
# EndpointSlices, then starts a resolver watching every pod and measures
# the heap it takes once synced (runtime.MemStats after a GC, against
# before it started), the time to sync, and ns per lookup on a mix of pod,
# service and unknown addresses, alone and from both CPUs. Each round is a
# fresh cluster; medians over the rounds.
# Knobs: BENCH_K8S_ROUNDS (3), BENCH_K8S_LOOKUPS (2000000 a case).
# Sourced by bench/run.sh.

bench_k8s() {
	local rounds=${BENCH_K8S_ROUNDS:-3} lookups=${BENCH_K8S_LOOKUPS:-2000000} r tsv=$WORK/k8s.tsv
	local bin=${LOUPE_KUBE_BIN:-/var/cache/loupe/peers/kube-1.34.4}
	if [[ ! -x $bin/kube-apiserver || ! -x $bin/etcd ]]; then
		echo "bench: k8s: no kube-apiserver and etcd in $bin: run scripts/peers/kube.sh" >&2
		return 1
	fi
	(cd "$ROOT" && go test -c -o "$WORK/k8s.test" ./internal/k8s)
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		# Every reported pair "value unit" of each case, as round, case,
		# unit, value.
		"$WORK/k8s.test" -test.run '^$' -test.bench '^BenchmarkResolver$' -test.benchtime "${lookups}x" 2>/dev/null |
			awk -v r="$r" '/^BenchmarkResolver\// {
				n = $1; sub(/^BenchmarkResolver\//, "", n); sub(/-[0-9]+$/, "", n)
				for (i = 3; i < NF; i += 2) print r "\t" n "\t" $(i+1) "\t" $i
			}' >>"$tsv"
		echo "bench: k8s round $r: $(awk -F'\t' -v r="$r" '$1 == r && ($3 == "ns/op" || $3 == "heap-MB") {printf "%s %s %s  ", $2, $4, $3}' "$tsv")" >&2
	done
	val() { awk -F'\t' -v c="$1" -v u="$2" '$2 == c && $3 == u {print $4}' "$tsv"; }
	runs() { val "$1" "$2" | paste -sd, - | sed 's/,/, /g'; }
	section_begin k8s "13. Kubernetes names: informer memory and lookup time"
	say "A real kube-apiserver $(basename "$bin" | sed 's/^kube-//') and etcd on loopback hold 5 000 pods (5 per ReplicaSet, over 50 nodes)" \
		"and 1 000 services with their EndpointSlices; a resolver watching every pod (no node name: the most this cluster can cost)" \
		"syncs, then names addresses: half pod IPs (each an endpoint of its service), a quarter service IPs, a quarter addresses" \
		"no one holds, at one time. Heap: \`runtime.MemStats.HeapAlloc\` after two GCs, once synced, minus before the resolver" \
		"started (informer caches, history, clients). $rounds rounds, each a fresh cluster; medians." "" \
		'```' "go test -c -o k8s.test ./internal/k8s" \
		"./k8s.test -test.run '^\$' -test.bench '^BenchmarkResolver\$' -test.benchtime ${lookups}x" '```' "" \
		"| measure | runs | median | target |" "| --- | --- | ---: | --- |"
	local heap ns
	heap=$(val cache heap-MB | median)
	ns=$(val resolve ns/op | median)
	say "| heap of the resolver once synced (MB) | $(runs cache heap-MB) | $heap | under 100 MB: **$(awk -v v="$heap" 'BEGIN {print (v < 100 ? "met" : "not met")}')** |" \
		"| time to sync (ms) | $(runs cache sync-ms) | $(val cache sync-ms | median) | |" \
		"| addresses known | $(runs cache addresses) | $(val cache addresses | median) | |" \
		"| Resolve (ns) | $(runs resolve ns/op) | $ns | under 1 µs: **$(awk -v v="$ns" 'BEGIN {print (v < 1000 ? "met" : "not met")}')** |" \
		"| ResolveEndpoint, port 8080/tcp (ns) | $(runs resolve-endpoint ns/op) | $(val resolve-endpoint ns/op | median) | |" \
		"| Resolve from 2 goroutines, per lookup (ns) | $(runs resolve-parallel ns/op) | $(val resolve-parallel ns/op | median) | |" \
		"| allocations per lookup | $(runs resolve allocs/op) | $(val resolve allocs/op | median) | |"
	section_end
}
