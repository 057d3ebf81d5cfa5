# Benchmark 13: per-hop latency (the per-hop latency seed's Figure 9 and
# its cost). Two "nodes" in namespaces, each with a "pod": pod A -veth-
# node A -VXLAN over a veth underlay- node B -veth- pod B, one agent with
# --latency per node (its own store, listener and control socket). nginx in
# pod B; from pod A, requests that carry traceparent after 2 KB of other
# headers (bench/cmd/hopclient).
#
#  1. Agreement with tcpdump: tcpdump (AF_PACKET, nanosecond time stamps)
#     on node A's three hooks (the pod's veth, vxlan0, the underlay) while
#     BENCH_LATENCY_REQUESTS requests run; for every request, each hop's
#     latency from Loupe's records (`loupe latency --json`) against the
#     difference of tcpdump's time stamps of the same segment (5-tuple and
#     sequence number) on the same interfaces: p50 and p99 of |Loupe -
#     tcpdump| per hop (bench/latency_compare.py). Target: 5 µs at p50,
#     20 µs at p99. The two take their stamps at different points of the
#     path (tcpdump's taps: after TC egress, before TC ingress), so part of
#     the difference is the stack between them, not an error of either.
#  2. Cost: h2load --h1 request latency p50/p99 against nginx, the agents
#     with --latency and without, alternating, BENCH_LATENCY_ROUNDS rounds.
#
# It needs the kernel half of per-hop latency (`loupe run --latency`); on a
# build without it the section says so and nothing is measured.
# Knobs: BENCH_LATENCY_REQUESTS (2000), BENCH_LATENCY_ROUNDS (3),
# BENCH_LATENCY_SECONDS (10). Sourced by bench/run.sh.

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

# latency_agents WITH: one agent per node, --latency when WITH is 1.
latency_agents() {
	local with=$1 node ns extra=()
	((with)) && extra=(--latency)
	for node in a b; do
		ns=$LAT_NA
		[[ $node == b ]] && ns=$LAT_NB
		rm -rf "$WORK/store-$node"
		start_agent "LAT_AGENT_$node" "$ns" "$WORK/agent-$node.log" --iface 'vp*' --iface vxlan0 --iface 'ul*' \
			--store "$WORK/store-$node" --listen "127.0.0.1:$((19500 + RANDOM % 400))" \
			--control "$WORK/agent-$node.sock" --pin-dir none "${extra[@]}"
	done
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

bench_latency() {
	local requests=${BENCH_LATENCY_REQUESTS:-2000} rounds=${BENCH_LATENCY_ROUNDS:-3} secs=${BENCH_LATENCY_SECONDS:-10}
	local r with ifc pids=() tsv=$WORK/http.tsv
	section_begin latency "Per-hop latency: agreement with tcpdump, and the cost on HTTP requests"
	if ! "$BIN/loupe" run --help 2>&1 | grep -q -- '--latency'; then
		say "_Not measured: this build has no \`loupe run --latency\` (the kernel half of per-hop latency has not landed)._"
		section_end
		return 0
	fi
	latency_topology
	latency_nginx

	# 1. Agreement with tcpdump on node A's hooks.
	latency_agents 1
	for ifc in vpa vxlan0 ula; do
		start_bg "LAT_TCPDUMP_$ifc" INT "$WORK/tcpdump-$ifc.log" ip netns exec "$LAT_NA" \
			tcpdump -i "$ifc" -n -s 256 --time-stamp-precision=nano -w "$WORK/$ifc.pcap" 'tcp port 80 or udp port 4789'
		pids+=("LAT_TCPDUMP_$ifc")
	done
	sleep 1
	ip netns exec "$LAT_PA" "$BIN/hopclient" -addr 10.81.2.2:80 -n "$requests" -pad 2048 -split 1 >"$WORK/client.tsv"
	sleep 1 # the matcher's window, then the store's flush
	for p in "${pids[@]}"; do stop_bg "${!p}" 10; done
	latency_stop_agents
	"$BIN/loupe" latency --store "$WORK/store-a" --since 0 --json >"$WORK/loupe.json"
	say "Requests from pod A to nginx in pod B: $requests, each with \`traceparent\` after 2 KB of other headers, written in two writes (TCP_NODELAY)." ""
	python3 "$BENCH_DIR/latency_compare.py" "$WORK/loupe.json" "$requests" vpa="$WORK/vpa.pcap" vxlan0="$WORK/vxlan0.pcap" ula="$WORK/ula.pcap" >>"$SECTION"

	# 2. HTTP request latency with and without --latency.
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		for with in 0 1; do
			latency_agents "$with"
			rm -f "$WORK/h2load.log"
			ip netns exec "$LAT_PA" h2load --h1 -D "$secs" -c 8 -t 1 --log-file="$WORK/h2load.log" http://10.81.2.2/foo >/dev/null
			latency_stop_agents
			# h2load's log: start time, status, request time in µs.
			awk -F'\t' -v r="$r" -v w="$with" '{print r "\t" w "\t" $3}' "$WORK/h2load.log" >>"$tsv"
		done
	done
	say "" "| agents | requests | p50 (µs) | p99 (µs) |" "| --- | --- | --- | --- |"
	for with in 0 1; do
		awk -F'\t' -v w="$with" '$2 == w {print $3}' "$tsv" | sort -n | awk -v w="$with" '
			{x[NR] = $1}
			END {printf "| %s | %d | %d | %d |\n", (w ? "--latency" : "without --latency"), NR, x[int(NR * 0.5) + 1], x[int(NR * 0.99) + 1]}' >>"$SECTION"
	done
	section_end
}
