# Benchmark 13: per-hop latency, the per-hop latency seed's Figures 8 and 9
# side by side, and the cost. Two "nodes" in namespaces, each with a
# "pod": pod A -veth- node A -VXLAN over a veth underlay- node B -veth-
# pod B, one agent with --latency per node (its own store, listener and
# control socket). nginx in pod B; from pod A, requests that carry
# traceparent after other headers (bench/cmd/hopclient).
#
#  detection  Figure 8: the share of requests whose traceparent is found,
#     by its position in the header block (100 B to 7.9 KB): from
#     TestLatencyDetectionRate (prog.Run, the default scan limit and the
#     scan cut at 800 bytes, the seed's reach) and from the agents' records
#     of BENCH_LATENCY_PER_POSITION real requests per position.
#  hops  Figure 9: tcpdump (AF_PACKET, nanosecond time stamps) on each
#     node's three hooks while BENCH_LATENCY_REQUESTS requests run, the
#     agents sampling every segment so that the replies are timed too; for
#     every hop of every record, Loupe's latency against the difference of
#     tcpdump's time stamps of the same segment (5-tuple and sequence
#     number) on the same interfaces: p50/p90/p99 of both, p50 and p99 of
#     |Loupe - tcpdump| per hop (bench/latency_compare.py). Target: 5 µs at
#     p50, 20 µs at p99. The two take their stamps at different points of
#     the path (tcpdump's taps: after TC egress, before TC ingress), so part
#     of the difference is the stack between them, not an error of either.
#  bpf  BPF ns per packet, detection off and on: BenchmarkLatency
#     (BPF_PROG_TEST_RUN), BENCH_LATENCY_ROUNDS rounds.
#  http  h2load --h1 request latency p50/p99 against nginx and the agents'
#     CPU, with --latency and without, alternating, BENCH_LATENCY_ROUNDS
#     rounds of BENCH_LATENCY_SECONDS; with h2load's requests as they are
#     (no trace context), at the default untraced sampling and with every
#     request stamped, then with traceparent on every request, sampled
#     (flags 01) and not (00).
#  rate  the seed's measure of the cost (its Table 1: vegeta at 1 and 80
#     QPS): request latency p50/p90/p99 at fixed rates far below what the
#     machine serves (BENCH_LATENCY_RATES, requests/s: 80 2000), with and
#     without --latency, alternating, BENCH_LATENCY_RATE_ROUNDS (6) rounds
#     of BENCH_LATENCY_RATE_SECONDS (10); every request with traceparent, then
#     none. Target: no significant change, read as the pooled p50 at most
#     5 % and the p99 at most 10 % above the runs without --latency.
#  hooks  what a hook's run time costs a request at a low rate on this
#     machine: request latency at BENCH_LATENCY_HOOKS_RATE (80) requests/s
#     with nothing at the six interfaces, the empty program, programs that
#     only spin for each of BENCH_LATENCY_HOOKS_SPINS ("1us 3us", hookbench
#     attach -spin), the agents without --latency and with it; the
#     configurations in turn, BENCH_LATENCY_HOOKS_ROUNDS (5) rounds of
#     BENCH_LATENCY_HOOKS_SECONDS (8); each one's BPF time per request
#     (bpf_stats: every program of the configuration, the agents' tracepoint
#     programs included) and the request p50 it adds over the empty program
#     per µs of BPF time it adds. No target: it tells how to read the rate
#     part's.
#
# Knobs: BENCH_LATENCY_REQUESTS (2000), BENCH_LATENCY_PER_POSITION (200),
# BENCH_LATENCY_ROUNDS (3), BENCH_LATENCY_SECONDS (10), BENCH_LATENCY_PARTS
# ("detection hops bpf http rate hooks"; a part left out keeps its tables from the
# section's earlier run, marked so), BENCH_LATENCY_PROFILE (a file: perf
# record -g of node A's agent during the http part's first run with
# --latency, its report written there; off by default, as perf slows the
# agent it samples), BENCH_LATENCY_PROFILE_MODE (which of the http part's
# four runs it samples: untraced, the default, untraced-all, traced or
# unsampled). Sourced by bench/run.sh.

# latency_topology: pod A, node A, node B, pod B; sets LAT_NS_*.
latency_topology() {
	local ns
	LAT_PA=lhp-$RUN_ID-pa LAT_NA=lhp-$RUN_ID-na LAT_NB=lhp-$RUN_ID-nb LAT_PB=lhp-$RUN_ID-pb
	for ns in "$LAT_PA" "$LAT_NA" "$LAT_NB" "$LAT_PB"; do
		ip netns add "$ns"
		NETNS+=("$ns")
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
		ip -n "$ns" link set lo up
	done
	ip -n "$LAT_PA" link add eth0 type veth peer name vpa netns "$LAT_NA"
	ip -n "$LAT_PB" link add eth0 type veth peer name vpb netns "$LAT_NB"
	ip -n "$LAT_NA" link add ula type veth peer name ulb netns "$LAT_NB"
	ip -n "$LAT_PA" addr add 10.81.1.2/24 dev eth0
	ip -n "$LAT_PB" addr add 10.81.2.2/24 dev eth0
	ip -n "$LAT_NA" addr add 10.81.1.1/24 dev vpa
	ip -n "$LAT_NB" addr add 10.81.2.1/24 dev vpb
	ip -n "$LAT_NA" addr add 192.168.81.1/24 dev ula
	ip -n "$LAT_NB" addr add 192.168.81.2/24 dev ulb
	ip -n "$LAT_NA" link add vxlan0 type vxlan id 81 local 192.168.81.1 remote 192.168.81.2 dstport 4789 dev ula
	ip -n "$LAT_NB" link add vxlan0 type vxlan id 81 local 192.168.81.2 remote 192.168.81.1 dstport 4789 dev ulb
	ip -n "$LAT_NA" addr add 10.81.0.1/32 dev vxlan0
	ip -n "$LAT_NB" addr add 10.81.0.2/32 dev vxlan0
	for ns in "$LAT_PA" "$LAT_PB"; do ip -n "$ns" link set eth0 up; done
	ip -n "$LAT_NA" link set vpa up; ip -n "$LAT_NA" link set ula up; ip -n "$LAT_NA" link set vxlan0 up
	ip -n "$LAT_NB" link set vpb up; ip -n "$LAT_NB" link set ulb up; ip -n "$LAT_NB" link set vxlan0 up
	ip -n "$LAT_PA" route add default via 10.81.1.1
	ip -n "$LAT_PB" route add default via 10.81.2.1
	ip -n "$LAT_NA" route add 10.81.2.0/24 dev vxlan0 onlink via 10.81.0.2
	ip -n "$LAT_NB" route add 10.81.1.0/24 dev vxlan0 onlink via 10.81.0.1
	for ns in "$LAT_NA" "$LAT_NB"; do ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1; done
	ip netns exec "$LAT_PA" ping -c 1 -W 2 10.81.2.2 >/dev/null
}

# latency_agents WITH [ARGS...]: one agent per node, --latency and ARGS
# when WITH is 1; sets LAT_AGENT_* and LAT_PORT_*.
latency_agents() {
	local with=$1 node ns extra=()
	shift
	((with)) && extra=(--latency "$@")
	for node in a b; do
		ns=$LAT_NA
		[[ $node == b ]] && ns=$LAT_NB
		rm -rf "$WORK/store-$node"
		printf -v "LAT_PORT_$node" '%s' $((19500 + RANDOM % 400))
		local port_var=LAT_PORT_$node
		start_agent "LAT_AGENT_$node" "$ns" "$WORK/agent-$node.log" --iface 'vp*' --iface vxlan0 --iface 'ul*' \
			--store "$WORK/store-$node" --listen "127.0.0.1:${!port_var}" \
			--control "$WORK/agent-$node.sock" --pin-dir none "${extra[@]}"
	done
}

# latency_agents_cpu: the CPU seconds (user + system) both agents have
# used so far.
latency_agents_cpu() {
	local tck
	tck=$(getconf CLK_TCK)
	awk -v t="$tck" '{s += $14 + $15} END {printf "%.2f\n", s / t}' "/proc/$LAT_AGENT_a/stat" "/proc/$LAT_AGENT_b/stat"
}

latency_stop_agents() {
	stop_agent "$LAT_AGENT_a"
	stop_agent "$LAT_AGENT_b"
}

# latency_nginx: nginx in pod B on 10.81.2.2:80, /foo answers 200.
latency_nginx() {
	local d=$WORK/nginx
	mkdir -p "$d"
	cat >"$d/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 8192; }
http {
	access_log off;
	client_body_temp_path $d/body;
	proxy_temp_path $d/proxy;
	fastcgi_temp_path $d/fastcgi;
	uwsgi_temp_path $d/uwsgi;
	scgi_temp_path $d/scgi;
	keepalive_requests 100000;
	large_client_header_buffers 4 16k;
	server {
		listen 10.81.2.2:80;
		location /foo { return 200 'foofoofoofoofoofoo'; }
	}
}
CONF
	start_bg LAT_NGINX TERM "$WORK/nginx.log" ip netns exec "$LAT_PB" nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
	sleep 0.5
}

# latency_metric NODE EVENT: the agent of NODE's loupe_latency_events_total
# for EVENT (every hook of the node summed).
latency_metric() {
	local ns=$LAT_NA port=$LAT_PORT_a
	[[ $1 == b ]] && ns=$LAT_NB port=$LAT_PORT_b
	ip netns exec "$ns" curl -fsS --max-time 5 "http://127.0.0.1:$port/metrics" |
		awk -v m="loupe_latency_events_total{event=\"$2\"}" '$1 == m {print $2}'
}

# The trace context of the HTTP runs: a sampled trace (flags 01), and one
# not sampled (00).
LAT_TP=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331

# latency_h2load_run ROUND WITH PROFILE [AGENT_ARGS...] -- [H2LOAD_ARGS...]:
# one h2load run from pod A against agents with --latency (WITH 1) or
# without, each started for the run; appends the run's request times to
# $WORK/http.tsv ("round with µs") and the agents' CPU seconds to
# $WORK/cpu.tsv. PROFILE 1: perf record node A's agent meanwhile, its report
# written to BENCH_LATENCY_PROFILE.
latency_h2load_run() {
	local r=$1 with=$2 profile=$3 agent=() cpu0 perf=
	shift 3
	while (($#)) && [[ $1 != -- ]]; do
		agent+=("$1")
		shift
	done
	shift
	latency_agents "$with" "${agent[@]}"
	rm -f "$WORK/h2load.log"
	cpu0=$(latency_agents_cpu)
	((profile)) && start_bg perf INT "$WORK/perf.log" perf record -g -o "$WORK/agent-a.perf" -p "$LAT_AGENT_a"
	ip netns exec "$LAT_PA" h2load --h1 -c 8 -t 1 "$@" --log-file="$WORK/h2load.log" http://10.81.2.2/foo >/dev/null
	if [[ -n $perf ]]; then
		stop_bg "$perf" 10
		perf report -i "$WORK/agent-a.perf" --stdio --no-children --percent-limit 0.5 --sort symbol >"$BENCH_LATENCY_PROFILE" 2>/dev/null
	fi
	printf '%s\t%s\t%s\n' "$r" "$with" "$(echo "$(latency_agents_cpu) - $cpu0" | bc)" >>"$WORK/cpu.tsv"
	latency_stop_agents
	# h2load's log: start time, status, request time in µs.
	awk -F'\t' -v r="$r" -v w="$with" '{print r "\t" w "\t" $3}' "$WORK/h2load.log" >>"$WORK/http.tsv"
}

# latency_hooks_bpf PREFIX...: "RUN_CNT RUN_TIME_NS" summed over the loaded
# programs whose names start with one of PREFIX (bpf_stats' counters).
latency_hooks_bpf() {
	local p
	for p in "$@"; do
		"$BIN/hookbench" progs -prefix "$p"
	done | awk '{c += $3; t += $4} END {printf "%.0f %.0f\n", c, t}'
}

# latency_hooks_run ROUND CONFIG QPS SECONDS: one h2load run from pod A at
# QPS requests/s with CONFIG at the six interfaces (none, empty, spin:D,
# flows: the agents without --latency, latency: with it); appends the
# request times to $WORK/hooks.tsv ("round config µs") and the BPF time
# to $WORK/hooks-bpf.tsv ("round config requests run_time_ns runs").
latency_hooks_run() {
	local r=$1 cfg=$2 qps=$3 secs=$4 hb=() spec ns ifc pid prefixes=() before after n
	case $cfg in
	empty | spin:*)
		for spec in "$LAT_NA vpa" "$LAT_NA vxlan0" "$LAT_NA ula" "$LAT_NB vpb" "$LAT_NB vxlan0" "$LAT_NB ulb"; do
			read -r ns ifc <<<"$spec"
			local args=(attach -iface "$ifc")
			[[ $cfg == spin:* ]] && args+=(-spin "${cfg#spin:}")
			start_bg pid TERM "$WORK/hook-$ifc-$ns.log" ip netns exec "$ns" "$BIN/hookbench" "${args[@]}"
			wait_log "$WORK/hook-$ifc-$ns.log" '^attached' 10 "$pid"
			hb+=("$pid")
		done
		prefixes=(baseline)
		[[ $cfg == spin:* ]] && prefixes=(spin)
		;;
	flows) latency_agents 0; prefixes=(loupe_ signals_) ;;
	latency) latency_agents 1; prefixes=(loupe_ signals_) ;;
	esac
	before="0 0"
	((${#prefixes[@]})) && before=$(latency_hooks_bpf "${prefixes[@]}")
	rm -f "$WORK/h2load.log"
	ip netns exec "$LAT_PA" h2load --h1 -c 8 -t 1 -D "$secs" --rps $((qps / 8)) --log-file="$WORK/h2load.log" http://10.81.2.2/foo >/dev/null
	after="0 0"
	((${#prefixes[@]})) && after=$(latency_hooks_bpf "${prefixes[@]}")
	n=$(wc -l <"$WORK/h2load.log")
	printf '%s\t%s\t%s\t%s\n' "$r" "$cfg" "$n" "$(awk -v b="$before" -v a="$after" 'BEGIN {split(b, x, " "); split(a, y, " "); printf "%.0f\t%.0f", y[2] - x[2], y[1] - x[1]}')" >>"$WORK/hooks-bpf.tsv"
	awk -F'\t' -v r="$r" -v c="$cfg" '{print r "\t" c "\t" $3}' "$WORK/h2load.log" >>"$WORK/hooks.tsv"
	for pid in "${hb[@]}"; do stop_bg "$pid" 10; done
	[[ $cfg == flows || $cfg == latency ]] && latency_stop_agents
	return 0
}

bench_latency() {
	local requests=${BENCH_LATENCY_REQUESTS:-2000} rounds=${BENCH_LATENCY_ROUNDS:-3} secs=${BENCH_LATENCY_SECONDS:-10}
	local per=${BENCH_LATENCY_PER_POSITION:-200} positions="100 400 800 1200 2048 4096 6144 7900"
	local parts=" ${BENCH_LATENCY_PARTS:-detection hops bpf http rate hooks} "
	local r with ifc node pos pids=() tsv=$WORK/http.tsv
	section_begin latency "14. Per-hop latency: detection, agreement with tcpdump, and the cost"
	(cd "$ROOT" && go test -c -o "$WORK/datapath.test" ./internal/datapath)
	latency_topology
	latency_nginx

	# Figure 8: detection rate against the position of traceparent.
	if [[ $parts == *" detection "* ]]; then
	# (a) prog.Run: TestLatencyDetectionRate, the default scan limit and
	# the scan cut at 800 bytes (the seed's reach).
	"$WORK/datapath.test" -test.run '^TestLatencyDetectionRate$' -test.v >"$WORK/detect-progrun.log" 2>&1
	# (b) real requests through the agent on the two-node topology.
	latency_agents 1
	for pos in $positions; do
		ip netns exec "$LAT_PA" "$BIN/hopclient" -addr 10.81.2.2:80 -n "$per" -pad "$pos" >"$WORK/detect-$pos.tsv"
	done
	sleep 1 # the matcher's window, then the store's flush
	for node in a b; do
		for ev in requests found_traceparent; do
			printf '%s\t%s\t%s\n' "$node" "$ev" "$(latency_metric "$node" "$ev")"
		done
	done >"$WORK/detect-counters.tsv"
	latency_stop_agents
	"$BIN/loupe" latency --store "$WORK/store-a" --since 0 --json >"$WORK/detect-a.json"
	"$BIN/loupe" latency --store "$WORK/store-b" --since 0 --json >"$WORK/detect-b.json"
	say "### Detection rate by the position of \`traceparent\` (the seed's Figure 8)" "" \
		"Requests GET /foo with \`traceparent\` after P bytes of other headers (P from 100 B to 7.9 KB: a request of about 8 KB)." \
		"_prog.Run_: BPF_PROG_TEST_RUN of the entry program on crafted 1448-byte segments (\`TestLatencyDetectionRate\`, deterministic, 5 requests per position), with the default scan limit (16 KiB) and with the scan cut at 800 bytes, the reach of the seed's unrolled scanner (the seed reports 0 % of its unmodified header found past 800 B)." \
		"_agent_: $per real requests per position from pod A to nginx in pod B on the two-node topology below (veth, VXLAN over a veth underlay, the kernel's GSO and GRO on), one agent with \`--latency\` per node; a request counts as found on a node when that node's \`loupe latency\` record of it carries its trace id." ""
	python3 "$BENCH_DIR/latency_compare.py" detection "$WORK/detect-progrun.log" "$WORK/detect-counters.tsv" \
		a="$WORK/detect-a.json" b="$WORK/detect-b.json" -- $(for pos in $positions; do echo "$pos=$WORK/detect-$pos.tsv"; done) >>"$SECTION"
	else
		python3 "$BENCH_DIR/latency_compare.py" keep "$BENCH_DIR/RESULTS.md" "Detection rate" >>"$SECTION"
	fi

	# Figure 9: agreement with tcpdump on every hook of both nodes, both
	# directions (the replies are timed by sampling every segment).
	if [[ $parts == *" hops "* ]]; then
	latency_agents 1 --latency-sampling 1
	pids=()
	for node in a b; do
		for ifc in vp$node vxlan0 ul$node; do
			local ns=$LAT_NA
			[[ $node == b ]] && ns=$LAT_NB
			start_bg "LAT_TCPDUMP_${node}_$ifc" INT "$WORK/tcpdump-$node-$ifc.log" ip netns exec "$ns" \
				tcpdump -i "$ifc" -n -s 256 -B 16384 --time-stamp-precision=nano -w "$WORK/$node-$ifc.pcap" 'tcp port 80 or udp port 4789'
			pids+=("LAT_TCPDUMP_${node}_$ifc")
		done
	done
	sleep 1
	ip netns exec "$LAT_PA" "$BIN/hopclient" -addr 10.81.2.2:80 -n "$requests" -pad 2048 -split 1 >"$WORK/client.tsv"
	sleep 1 # the matcher's window, then the store's flush
	for p in "${pids[@]}"; do stop_bg "${!p}" 10; done
	latency_stop_agents
	say "" "### Per-hop latency against tcpdump (the seed's Figure 9)" "" \
		"$requests requests from pod A to nginx in pod B, each with \`traceparent\` after 2 KB of other headers, written in two writes (TCP_NODELAY); agents with \`--latency --latency-sampling 1\`, so that the replies are timed too. tcpdump (AF_PACKET, \`--time-stamp-precision=nano\`) on each node's three hooks at the same time. For every hop of every record, Loupe's latency against the difference of tcpdump's time stamps of the same segment (inner 5-tuple and first sequence number, first sight) on the same two interfaces. tcpdump's taps are not where the TC hooks are (ingress: the tap before TC; egress: TC before the tap), so part of each difference is the stack between them." ""
	for node in a b; do
		"$BIN/loupe" latency --store "$WORK/store-$node" --since 0 --json >"$WORK/loupe-$node.json"
		say "Node $node:" ""
		python3 "$BENCH_DIR/latency_compare.py" hops "$WORK/loupe-$node.json" "$requests" \
			"vp$node=$WORK/$node-vp$node.pcap" "vxlan0=$WORK/$node-vxlan0.pcap" "ul$node=$WORK/$node-ul$node.pcap" >>"$SECTION"
		say ""
	done
	else
		python3 "$BENCH_DIR/latency_compare.py" keep "$BENCH_DIR/RESULTS.md" "Per-hop latency against" >>"$SECTION"
	fi

	# The cost in the kernel: BenchmarkLatency, alternating its
	# configurations within each round.
	if [[ $parts == *" bpf "* ]]; then
	: >"$WORK/bpf.txt"
	for ((r = 1; r <= rounds; r++)); do
		"$WORK/datapath.test" -test.run '^$' -test.bench '^BenchmarkLatency$' -test.benchtime 200000x >>"$WORK/bpf.txt" 2>&1
	done
	say "### BPF ns per packet, detection off and on" "" \
		"BPF_PROG_TEST_RUN of the egress entry program (\`BenchmarkLatency\`, 200 000 runs per packet, $rounds rounds; in each round every configuration in turn): the flows-only build, the build with every capability and latency off, latency on (requests only) and latency on with every TCP segment sampled. Medians of the rounds, ns per packet, with the rounds' values." ""
	python3 "$BENCH_DIR/latency_compare.py" bpf "$WORK/bpf.txt" >>"$SECTION"
	else
		python3 "$BENCH_DIR/latency_compare.py" keep "$BENCH_DIR/RESULTS.md" "BPF ns per packet" >>"$SECTION"
	fi

	# The cost on HTTP requests: h2load with and without --latency,
	# alternating, rounds.
	if [[ $parts == *" http "* ]]; then
	say "" "### HTTP request latency with and without \`--latency\`" "" \
		"h2load --h1 from pod A to nginx in pod B, 8 connections, ${secs} s per run, one agent per node with \`--latency\` or without; the two alternate, $rounds rounds. The machine has 2 CPUs shared by h2load, nginx, both agents and other work: compare within this run only. Four times: h2load's requests as they are, without a trace context, with the default untraced sampling (1 request in 16 stamped: its stamps reach the agents, and a record without a trace id); the same with \`--latency-untraced-sampling 1\` (every request stamped, as before the untraced sampling); with a \`traceparent\` header on every request, the seed's case (every request stamped, its context found, and a record with its trace id); and with a \`traceparent\` of a trace not sampled on every request (flags \`00\`, as most requests carry under head sampling: 1 in 16 stamped, the rest counted)." ""
	local mode
	for mode in untraced untraced-all traced unsampled; do
		local hdr=() args=()
		[[ $mode == traced ]] && hdr=(-H "traceparent: $LAT_TP-01")
		[[ $mode == unsampled ]] && hdr=(-H "traceparent: $LAT_TP-00")
		[[ $mode == untraced-all ]] && args=(--latency-untraced-sampling 1)
		: >"$tsv"
		: >"$WORK/cpu.tsv"
		for ((r = 1; r <= rounds; r++)); do
			for with in 0 1; do
				local profile=0
				[[ -n ${BENCH_LATENCY_PROFILE:-} ]] && ((r == 1 && with)) && [[ $mode == "${BENCH_LATENCY_PROFILE_MODE:-untraced}" ]] && profile=1
				latency_h2load_run "$r" "$with" "$profile" "${args[@]}" -- -D "$secs" "${hdr[@]}"
			done
		done
		case $mode in
		traced) say "**Every request with \`traceparent\`**" "" ;;
		unsampled) say "**Every request with \`traceparent\` of a trace not sampled (flags \`00\`: stamped as requests without a context are)**" "" ;;
		untraced) say "**Requests without a trace context (1 in 16 stamped, the default)**" "" ;;
		*) say "**Requests without a trace context, every one stamped (\`--latency-untraced-sampling 1\`)**" "" ;;
		esac
		python3 "$BENCH_DIR/latency_compare.py" http "$tsv" "$WORK/cpu.tsv" >>"$SECTION"
		say ""
	done
	else
		python3 "$BENCH_DIR/latency_compare.py" keep "$BENCH_DIR/RESULTS.md" "HTTP request latency with and without" >>"$SECTION"
	fi
	# The seed's own measure of the cost: request latency at fixed rates
	# (it ran vegeta at 1 and 80 QPS), far below what the machine
	# serves, with and without the agents.
	local qps rsecs=${BENCH_LATENCY_RATE_SECONDS:-10} rrounds=${BENCH_LATENCY_RATE_ROUNDS:-6} rates=${BENCH_LATENCY_RATES:-80 2000}
	if [[ $parts == *" rate "* ]]; then
	say "" "### HTTP request latency at fixed rates, with and without \`--latency\` (the seed's Table 1)" "" \
		"The seed measured the cost as the end-to-end latency of requests sent at a fixed rate (vegeta at 1 and 80 QPS), with and without its tracing, and found no significant change. Here: h2load --h1 from pod A to nginx in pod B at a fixed rate (8 connections, \`--rps\` each; 1 QPS would give too few requests for a p99), ${rsecs} s per run, one agent per node with \`--latency\` or without, alternating, $rrounds rounds; with a sampled \`traceparent\` on every request (the seed's case: every request stamped at every hook and its context found) and with h2load's requests as they are (no trace context, 1 in 16 stamped, the default). Request times from h2load's log, nearest-rank percentiles over the pooled runs of each configuration (the target's), and, apart, the median over the rounds of each round's percentile with \`--latency\` over the one without (paired by round, so that what drifts between rounds cancels)." ""
	for qps in $rates; do
		for mode in traced untraced; do
			local hdr=()
			[[ $mode == traced ]] && hdr=(-H "traceparent: $LAT_TP-01")
			: >"$tsv"
			: >"$WORK/cpu.tsv"
			for ((r = 1; r <= rrounds; r++)); do
				for with in 0 1; do
					latency_h2load_run "$r" "$with" 0 -- -D "$rsecs" --rps $((qps / 8)) "${hdr[@]}"
				done
			done
			if [[ $mode == traced ]]; then
				say "**$qps requests/s, every request with \`traceparent\`**" ""
			else
				say "**$qps requests/s, requests without a trace context (1 in 16 stamped)**" ""
			fi
			python3 "$BENCH_DIR/latency_compare.py" rate "$tsv" "$WORK/cpu.tsv" "$rsecs" >>"$SECTION"
			say ""
		done
	done
	else
		python3 "$BENCH_DIR/latency_compare.py" keep "$BENCH_DIR/RESULTS.md" "HTTP request latency at fixed rates" >>"$SECTION"
	fi
	# What a hook's run time costs a request at a low rate here: the
	# rate part's yardstick.
	local hrounds=${BENCH_LATENCY_HOOKS_ROUNDS:-5} hsecs=${BENCH_LATENCY_HOOKS_SECONDS:-8} hqps=${BENCH_LATENCY_HOOKS_RATE:-80}
	local spins=${BENCH_LATENCY_HOOKS_SPINS:-1us 3us}
	if [[ $parts == *" hooks "* ]]; then
		local cfgs=(none empty) c i
		for c in $spins; do cfgs+=("spin:$c"); done
		cfgs+=(flows latency)
		: >"$WORK/hooks.tsv"
		: >"$WORK/hooks-bpf.tsv"
		bpf_stats_enable
		for ((r = 1; r <= hrounds; r++)); do
			for ((i = 0; i < ${#cfgs[@]}; i++)); do
				latency_hooks_run "$r" "${cfgs[$(((i + r) % ${#cfgs[@]}))]}" "$hqps" "$hsecs"
			done
		done
		bpf_stats_restore
		say "" "### What a hook's run time costs a request at a low rate" "" \
			"The yardstick of the fixed-rate part: h2load --h1 from pod A to nginx in pod B at $hqps requests/s (8 connections), $hsecs s per run, $hrounds rounds, each round every configuration in turn: nothing at the six interfaces of the two nodes; the empty TC program (\`hookbench attach\`) at both hooks of each; a program that does nothing but read the clock for a given time per run (\`hookbench attach -spin\`); the agents without \`--latency\` and with it (requests without a trace context). BPF time per request: bpf_stats' run time of every program of the configuration (the agents' tracepoint programs included) over the run, divided by its requests. Request times from h2load's log, pooled over the rounds. The last column: what the configuration adds to the p50 over the empty program, per µs of BPF time it adds per request." ""
		python3 "$BENCH_DIR/latency_compare.py" hooks "$WORK/hooks.tsv" "$WORK/hooks-bpf.tsv" >>"$SECTION"
	else
		python3 "$BENCH_DIR/latency_compare.py" keep "$BENCH_DIR/RESULTS.md" "What a hook's run time costs" >>"$SECTION"
	fi
	say "" '```' "bench/run.sh latency   # BENCH_LATENCY_PARTS=\"${parts:1:-1}\" BENCH_LATENCY_REQUESTS=$requests BENCH_LATENCY_PER_POSITION=$per BENCH_LATENCY_ROUNDS=$rounds BENCH_LATENCY_SECONDS=$secs BENCH_LATENCY_RATES=\"$rates\" BENCH_LATENCY_RATE_ROUNDS=$rrounds BENCH_LATENCY_RATE_SECONDS=$rsecs BENCH_LATENCY_HOOKS_ROUNDS=$hrounds BENCH_LATENCY_HOOKS_SECONDS=$hsecs BENCH_LATENCY_HOOKS_RATE=$hqps BENCH_LATENCY_HOOKS_SPINS=\"$spins\"" '```'
	section_end
}
