# Benchmark 8: the capture capability against the seed thesis's tables 5.1-5.3
# (shared/seeds/000, chapter 5), all in one run on one veth pair between two
# network namespaces, A (clients) and B (servers and the agent):
#   a) iperf3 TCP throughput (table 5.1): untraced, hooks only, flows,
#      flows + trigger, in alternation;
#   b) nginx + h2load --h1 request rate and request time percentiles
#      (tables 5.2 and 5.3) at 0 % errors (/foo) and 100 % errors (/bar):
#      untraced, flows, flows + trigger, flows + trigger mirroring only (the
#      thesis's set-up: no files), in alternation;
#   c) BPF ns per packet of the entry programs on that HTTP traffic
#      (bpf_stats): the empty program, flows, flows + trigger;
#   d) capture throughput: packets/s the agent writes to pcapng without loss,
#      against tcpdump -w on the same traffic (a replayed connection whose
#      server answered 500 and then streams data), at fixed rates.
# "hooks only" is the empty TC program (hookbench attach): `loupe run` has no
# switch that turns flows off. "flows + trigger" is the agent with
# --capture-dir, so the default trigger (http.status=500-599).
# Knobs (environment): BENCH_CAPTURE_IPERF_ROUNDS (3), BENCH_CAPTURE_IPERF_SECONDS
# (6), BENCH_CAPTURE_HTTP_ROUNDS (7), BENCH_CAPTURE_HTTP_SECONDS (3),
# BENCH_CAPTURE_BPF_ROUNDS (2), BENCH_CAPTURE_BPF_SECONDS (3),
# BENCH_CAPTURE_SIZES ("128 1514", frame bytes), BENCH_CAPTURE_RATES
# ("25000 50000 100000 200000 400000 topspeed"), BENCH_CAPTURE_RATE_SECONDS (3).
# About 8 minutes with the defaults.
# Sourced by bench/run.sh.

# The thesis's parameters, for the section: 8 threads, iperf3 60 s (-Z -O 10)
# and h2load -D 60 -c 10 -m 1 -N 15 -T 15 --h1 against nginx with 2 workers,
# 8192 worker connections, 10 000 keep-alive requests, 801 runs each.
# Scaled to 2 cores: nginx has 1 worker, pinned to CPU 0; h2load 1 thread of
# 10 clients, pinned to CPU 1; runs of seconds, a few rounds, medians.

CAP_AGENT_SEQ=0

bench_capture() {
	local t0=$SECONDS t
	for t in nginx h2load curl; do
		command -v "$t" >/dev/null || {
			echo "bench: capture: $t missing: run ./scripts/deps.sh bench" >&2
			return 1
		}
	done
	CAP_ROOT=$(mktemp -d /dev/shm/loupe-bench-capture.XXXXXX)
	CLEANUP_DIRS+=("$CAP_ROOT")
	cap_scripts
	CAP_LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
	CAP_BUSY_BEFORE=$(cpu_busy 2)
	new_pair
	# The mirror interface of the "mirror" configuration: a veth pair in B,
	# as the thesis's debug interface; nothing reads it.
	MIR_IF=${IF_B}m
	ip -n "$NS_B" link add "$MIR_IF" type veth peer name "${IF_B}n"
	ip -n "$NS_B" link set "$MIR_IF" up
	ip -n "$NS_B" link set "${IF_B}n" up
	AGENT_ARGS=(--iface "$IF_B" --control none --pin-dir none)

	cap_iperf
	cap_http
	cap_bpf
	cap_rate

	del_pair
	CAP_BUSY_AFTER=$(cpu_busy 2)
	CAP_LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
	CAP_SECONDS=$((SECONDS - t0))
	cap_section
}

# --- shared pieces -------------------------------------------------------------

# cpu_busy SECONDS: percent of all CPUs busy (not idle, not iowait) over the
# next SECONDS, while this benchmark runs nothing: the load of other work.
cpu_busy() {
	local a b
	a=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat)
	sleep "$1"
	b=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat)
	echo "$a $b" | awk '{busy = $3 - $1; idle = $4 - $2; printf "%.0f", 100 * busy / (busy + idle)}'
}

# mval FILE NAME: a metric's value from a /metrics snapshot (0 if absent).
mval() {
	awk -v m="$2" '$1 == m {v = $2} END {printf "%.0f\n", v}' "$1"
}

# snapshot NS FILE: the agent's /metrics in NS, into FILE.
snapshot() {
	ip netns exec "$1" curl -fsS --max-time 5 http://127.0.0.1:9464/metrics >"$2"
}

# if_packets NS IF: packets received plus sent by the interface.
if_packets() {
	echo $(($(ip netns exec "$1" cat "/sys/class/net/$2/statistics/rx_packets") + $(ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_packets")))
}

# mode_start MODE TAG [ARGS...]: set up a configuration on B's veth:
# untraced (nothing), hooks (the empty program), flows (the agent),
# trigger (the agent with a capture directory of its own), mirror (the
# agent's default trigger cloning to MIR_IF, no files); extra agent ARGS
# after TAG. Sets MODE_PID and, for trigger, CAP_DIR.
mode_start() {
	local mode=$1 tag=$2
	shift 2
	MODE_PID="" CAP_DIR=""
	CAP_AGENT_SEQ=$((CAP_AGENT_SEQ + 1))
	local store=$WORK/store-$CAP_AGENT_SEQ
	case $mode in
	untraced) ;;
	hooks)
		start_bg MODE_PID TERM "$WORK/hook-$tag.log" ip netns exec "$NS_B" "$BIN/hookbench" attach -iface "$IF_B"
		wait_log "$WORK/hook-$tag.log" '^attached' 10 "$MODE_PID"
		;;
	flows)
		start_agent MODE_PID "$NS_B" "$WORK/agent-$tag.log" "${AGENT_ARGS[@]}" --store "$store" "$@"
		;;
	trigger)
		CAP_DIR=$CAP_ROOT/capture-$CAP_AGENT_SEQ
		start_agent MODE_PID "$NS_B" "$WORK/agent-$tag.log" "${AGENT_ARGS[@]}" --store "$store" --capture-dir "$CAP_DIR" "$@"
		;;
	mirror)
		start_agent MODE_PID "$NS_B" "$WORK/agent-$tag.log" "${AGENT_ARGS[@]}" --store "$store" --mirror "$MIR_IF" "$@"
		;;
	*)
		echo "bench: unknown mode $mode" >&2
		return 1
		;;
	esac
}

# mode_stop MODE: undo mode_start (the agent's store and captures deleted).
mode_stop() {
	case $1 in
	untraced) ;;
	hooks) stop_bg "$MODE_PID" ;;
	flows | trigger | mirror)
		stop_agent "$MODE_PID"
		rm -rf "$WORK/store-$CAP_AGENT_SEQ"
		[[ -z $CAP_DIR ]] || rm -rf "$CAP_DIR"
		;;
	esac
}

# rotate R WORDS...: the words, starting at the (R mod n)th: each round
# starts with another configuration, so that none always follows a pause.
rotate() {
	local r=$1 i n
	shift
	n=$#
	local w=("$@")
	for ((i = 0; i < n; i++)); do
		printf '%s ' "${w[(i + r) % n]}"
	done
}

cpu_seconds() {
	"$BIN/procstat" -pid "$1" -once | awk '{print $1}'
}

cap_scripts() {
	# Request times from h2load's --log-file (start µs, status, duration µs
	# per request): count, requests with another status, and the
	# nearest-rank percentiles 50, 90, 99, 99.9, 99.99 in µs.
	cat >"$WORK/pct.py" <<'EOF'
import math, sys
want = int(sys.argv[2])
d, bad = [], 0
with open(sys.argv[1]) as f:
    for line in f:
        p = line.split()
        if len(p) < 3:
            continue
        d.append(int(p[2]))
        if int(p[1]) != want:
            bad += 1
d.sort()
n = len(d)
def pct(q):
    return d[max(0, math.ceil(q / 100 * n) - 1)] if n else float("nan")
print(n, bad, *(pct(q) for q in (50, 90, 99, 99.9, 99.99)))
EOF
	# Packets in pcap and pcapng files (enhanced and simple packet blocks).
	cat >"$WORK/pktcount.py" <<'EOF'
import mmap, struct, sys
total = 0
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        try:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            continue
        magic = m[:4]
        if magic == b"\x0a\x0d\x0d\x0a":
            off, end = 0, len(m)
            bo = "<"
            while off + 12 <= end:
                t = struct.unpack_from(bo + "I", m, off)[0]
                if t == 0x0A0D0D0A:
                    bo = "<" if m[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
                l = struct.unpack_from(bo + "I", m, off + 4)[0]
                if t in (6, 3):
                    total += 1
                if l < 12:
                    break
                off += l
        else:
            bo = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
            off, end = 24, len(m)
            while off + 16 <= end:
                total += 1
                off += 16 + struct.unpack_from(bo + "I", m, off + 8)[0]
print(total)
EOF
}

# --- a) iperf3: table 5.1 ------------------------------------------------------

cap_iperf() {
	local rounds=${BENCH_CAPTURE_IPERF_ROUNDS:-3} secs=${BENCH_CAPTURE_IPERF_SECONDS:-6} omit=1
	local r mode srv gbps retr m tsv=$WORK/cap-iperf.tsv
	IPERF_SECS=$secs IPERF_ROUNDS=$rounds
	IPERF_CLIENT=(ip netns exec "$NS_A" timeout $((secs + omit + 30)) iperf3 -c 198.18.0.2 -t "$secs" -O "$omit" -Z -A 0,0 -J)
	start_bg srv TERM "$WORK/iperf3-server.log" ip netns exec "$NS_B" iperf3 -s -B 198.18.0.2 --forceflush
	wait_log "$WORK/iperf3-server.log" "Server listening" 10 "$srv"
	: >"$tsv"
	: >"$WORK/cap-iperf-load.txt"
	for ((r = 1; r <= rounds; r++)); do
		echo "$r $(cpu_busy 0.5)" >>"$WORK/cap-iperf-load.txt"
		for mode in $(rotate "$r" untraced hooks flows trigger); do
			mode_start "$mode" "iperf-$r-$mode"
			"${IPERF_CLIENT[@]}" >"$WORK/iperf.json"
			m=$WORK/metrics-iperf.txt
			: >"$m"
			[[ $mode != trigger ]] || snapshot "$NS_B" "$m"
			mode_stop "$mode"
			read -r gbps retr < <(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["end"]
print(e["sum_received"]["bits_per_second"] / 1e9, e["sum_sent"].get("retransmits", 0))' "$WORK/iperf.json")
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$mode" "$gbps" "$retr" \
				"$(mval "$m" 'loupe_capture_datapath_events_total{event="segments_scanned"}')" \
				"$(mval "$m" 'loupe_capture_datapath_events_total{event="bytes_scanned"}')" \
				"$(mval "$m" 'loupe_capture_datapath_events_total{event="triggers"}')" >>"$tsv"
			echo "bench: capture iperf round $r $mode: $(fmt %.2f "$gbps") Gbit/s, $retr retransmits" >&2
		done
	done
	stop_bg "$srv"
}

# --- b) and c): nginx and h2load ----------------------------------------------

nginx_start() {
	local d=$WORK/nginx i
	mkdir -p "$d"
	cat >"$d/nginx.conf" <<EOF
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
	keepalive_requests 10000;
	server {
		listen 198.18.0.2:80;
		location /foo { return 200 'foofoofoofoofoofoo'; }
		location /bar { return 500 'bar'; }
	}
}
EOF
	NGINX_CONF=$d/nginx.conf
	start_bg NGINX_PID TERM "$WORK/nginx.log" taskset -c 0 ip netns exec "$NS_B" nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
	for ((i = 0; i < 100; i++)); do
		ip netns exec "$NS_A" curl -fs -o /dev/null --max-time 1 http://198.18.0.2/foo && return 0
		alive "$NGINX_PID" || break
		sleep 0.1
	done
	echo "bench: nginx did not answer; it says:" >&2
	cat "$WORK/nginx.log" "$WORK/nginx/error.log" >&2 2>/dev/null || true
	return 1
}

# h2load_run ERRORS SECS OUT: one h2load run against /foo (0 % errors) or
# /bar (100 %), its request log deleted first (h2load appends to it).
# Prints "REQ_PER_S N BAD P50 P90 P99 P99.9 P99.99" (times in µs).
h2load_run() {
	local path=/foo want=200 rps
	[[ $1 == 0 ]] || path=/bar want=500
	rm -f "$WORK/h2load.log"
	taskset -c 1 ip netns exec "$NS_A" timeout $(($2 + 40)) h2load --h1 -c 10 -m 1 -t 1 -N 15 -T 15 -D "$2" --warm-up-time 1 \
		--log-file "$WORK/h2load.log" "http://198.18.0.2$path" >"$3" 2>&1 || true
	rps=$(awk '/^finished in/ {print $4}' "$3")
	if [[ -z $rps ]]; then
		echo "bench: h2load failed; it says:" >&2
		sed 's/^/    /' "$3" >&2
		return 1
	fi
	echo "$rps $(python3 "$WORK/pct.py" "$WORK/h2load.log" "$want")"
	rm -f "$WORK/h2load.log"
}

H2LOAD_SHOWN='taskset -c 1 ip netns exec A h2load --h1 -c 10 -m 1 -t 1 -N 15 -T 15 -D SECS --warm-up-time 1 --log-file LOG http://198.18.0.2/foo|/bar'

cap_http() {
	local rounds=${BENCH_CAPTURE_HTTP_ROUNDS:-7} secs=${BENCH_CAPTURE_HTTP_SECONDS:-3}
	local r err errs mode res c0 c1 cpu0 cpu1 m tsv=$WORK/cap-http.tsv
	HTTP_SECS=$secs HTTP_ROUNDS=$rounds
	nginx_start
	: >"$tsv"
	: >"$WORK/cap-http-load.txt"
	for ((r = 1; r <= rounds; r++)); do
		echo "$r $(cpu_busy 0.5)" >>"$WORK/cap-http-load.txt"
		errs="0 100"
		((r % 2)) || errs="100 0"
		for err in $errs; do
			for mode in $(rotate "$r" untraced flows trigger mirror); do
				c0=$(if_packets "$NS_B" "$IF_B")
				mode_start "$mode" "http-$r-$err-$mode"
				cpu0=0
				[[ $mode == untraced ]] || cpu0=$(cpu_seconds "$MODE_PID")
				res=$(h2load_run "$err" "$secs" "$WORK/h2load-$r-$err-$mode.out")
				m=$WORK/metrics-http.txt
				: >"$m"
				cpu1=0
				if [[ $mode != untraced ]]; then
					cpu1=$(cpu_seconds "$MODE_PID")
					snapshot "$NS_B" "$m"
				fi
				mode_stop "$mode"
				c1=$(if_packets "$NS_B" "$IF_B")
				# round err mode rps n bad p50 p90 p99 p999 p9999 packets
				# agent-cpu triggers written lost-datapath lost-reader limited
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$err" "$mode" \
					"$(echo "$res" | tr ' ' '\t')" "$((c1 - c0))" "$(calc "$cpu1 - $cpu0")" \
					"$(mval "$m" 'loupe_capture_datapath_events_total{event="triggers"}')" \
					"$(mval "$m" loupe_capture_packets_written_total)" \
					"$(mval "$m" 'loupe_capture_datapath_events_total{event="packets_lost"}')" \
					"$(mval "$m" loupe_capture_reader_lost_total)" \
					"$(mval "$m" 'loupe_capture_datapath_events_total{event="traces_limited"}')" >>"$tsv"
				echo "bench: capture http round $r, $err % errors, $mode: $(echo "$res" | awk '{printf "%.0f req/s, p50 %d us, p99 %d us", $1, $4, $6}')" >&2
			done
		done
	done
}

# c) bpf_stats on the same traffic; nginx still running from cap_http.
cap_bpf() {
	local rounds=${BENCH_CAPTURE_BPF_ROUNDS:-2} secs=${BENCH_CAPTURE_BPF_SECONDS:-3}
	local r err errs mode res s0 s1 m tsv=$WORK/cap-bpf.tsv
	BPF_SECS=$secs BPF_ROUNDS=$rounds
	bpf_stats_enable
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		errs="0 100"
		((r % 2)) || errs="100 0"
		for err in $errs; do
			for mode in $(rotate "$r" hooks flows trigger); do
				mode_start "$mode" "bpf-$r-$err-$mode"
				s0=$(hook_stats)
				res=$(h2load_run "$err" "$secs" "$WORK/h2load-bpf.out")
				s1=$(hook_stats)
				m=$WORK/metrics-bpf.txt
				: >"$m"
				[[ $mode == hooks ]] || snapshot "$NS_B" "$m"
				mode_stop "$mode"
				# round err mode rps | in_cnt in_ns eg_cnt eg_ns all_cnt all_ns | captured
				printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$err" "$mode" "${res%% *}" \
					"$(echo "$s0 $s1" | awk '{printf "%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f", $7-$1, $8-$2, $9-$3, $10-$4, $11-$5, $12-$6}')" \
					"$(mval "$m" 'loupe_capture_datapath_events_total{event="packets"}')" >>"$tsv"
				echo "bench: capture bpf round $r, $err % errors, $mode: $(echo "$s0 $s1" | awk '{printf "%.1f ns/packet over %d runs", ($12-$6)/($11-$5), $11-$5}')" >&2
			done
		done
	done
	bpf_stats_restore
	stop_bg "$NGINX_PID"
}

# hook_stats: "IN_CNT IN_NS EG_CNT EG_NS ALL_CNT ALL_NS" of the programs
# attached to B's veth (a program at both hooks counts in ALL only).
hook_stats() {
	ip netns exec "$NS_B" "$BIN/hookbench" stats -iface "$IF_B" |
		awk '$1 == "ingress" {ic += $4; it += $5} $1 == "egress" {ec += $4; et += $5} {ac += $4; at += $5}
		END {printf "%.0f %.0f %.0f %.0f %.0f %.0f\n", ic, it, ec, et, ac, at}'
}

# --- d) capture throughput: the agent against tcpdump ------------------------------

RATE_TRIGGER='http.status=500-599 packets=0 bytes=0 duration=0'
RATE_FILTER='tcp and host 198.18.1.1 and port 80'

cap_rate() {
	local sizes=(${BENCH_CAPTURE_SIZES:-128 1514}) rates=(${BENCH_CAPTURE_RATES:-25000 50000 100000 200000 400000 topspeed})
	local secs=${BENCH_CAPTURE_RATE_SECONDS:-3}
	local size rate tool tools i n loops speed pid rx0 rx1 sent pps written lost rlost file prev cur m tsv=$WORK/cap-rate.tsv
	RATE_SECS=$secs
	for size in "${sizes[@]}"; do
		"$BIN/gentrace" -kind http500 -packets 10000 -min "$size" -out "$WORK/http500-$size.pcap" >&2
	done
	: >"$tsv"
	n=0
	for size in "${sizes[@]}"; do
		for rate in "${rates[@]}"; do
			if [[ $rate == topspeed ]]; then
				speed=(--topspeed) loops=1000
			else
				speed=(--pps "$rate") loops=$((rate * secs / 10000 + 1))
			fi
			n=$((n + 1))
			tools="loupe tcpdump"
			((n % 2)) || tools="tcpdump loupe"
			for tool in $tools; do
				rx0=$(rx_packets "$NS_B" "$IF_B")
				if [[ $tool == loupe ]]; then
					mode_start trigger "rate-$size-$rate" --trigger "$RATE_TRIGGER" --capture-max-size 0 --capture-max-files 0
					pid=$MODE_PID
				else
					file=$CAP_ROOT/tcpdump.pcap
					start_bg pid INT "$WORK/tcpdump.log" ip netns exec "$NS_B" tcpdump -i "$IF_B" -n -w "$file" "$RATE_FILTER"
					wait_log "$WORK/tcpdump.log" 'listening on' 10 "$pid"
				fi
				taskset -c 1 ip netns exec "$NS_A" tcpreplay -i "$IF_A" --preload-pcap "${speed[@]}" --loop "$loops" --duration "$secs" \
					"$WORK/http500-$size.pcap" >"$WORK/replay.log" 2>&1
				rx1=$(rx_packets "$NS_B" "$IF_B")
				sent=$(awk '/Actual:/ {print $2}' "$WORK/replay.log")
				pps=$(awk '/Rated:/ {printf "%.0f", $6}' "$WORK/replay.log")
				if [[ $tool == loupe ]]; then
					# Until the agent has written what the datapath sent it.
					m=$WORK/metrics-rate.txt
					prev=-1
					for ((i = 0; i < 100; i++)); do
						snapshot "$NS_B" "$m"
						cur=$(mval "$m" loupe_capture_packets_written_total)
						[[ $cur != "$prev" ]] || break
						prev=$cur
						sleep 0.2
					done
					written=$cur
					# The same losses seen from both sides: the program's
					# failed output, and the kernel's lost records the
					# reader is told of.
					lost=$(mval "$m" 'loupe_capture_datapath_events_total{event="packets_lost"}')
					rlost=$(mval "$m" loupe_capture_reader_lost_total)
					stop_agent "$pid"
					file=$(python3 "$WORK/pktcount.py" "$CAP_DIR"/*.pcapng)
					rm -rf "$CAP_DIR" "$WORK/store-$CAP_AGENT_SEQ"
				else
					sleep 2
					stop_bg "$pid"
					written=$(awk '/packets captured/ {print $1}' "$WORK/tcpdump.log")
					lost=$(awk '/dropped by kernel/ {print $1}' "$WORK/tcpdump.log")
					rlost=-
					file=$(python3 "$WORK/pktcount.py" "$CAP_ROOT/tcpdump.pcap")
					rm -f "$CAP_ROOT/tcpdump.pcap"
				fi
				# size rate tool sent pps received written file lost reader-lost
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$rate" "$tool" "$sent" "$pps" "$((rx1 - rx0))" \
					"$written" "$file" "$lost" "$rlost" >>"$tsv"
				echo "bench: capture rate $size B at $rate, $tool: sent $sent at $pps pps, written $written, in the file $file, lost $lost (reader: $rlost)" >&2
			done
		done
	done
}

# --- the section -----------------------------------------------------------------

cap_section() {
	local tsv mode err b v runs pr lo hi p col base_p q
	section_begin capture "8. Triggered capture: the thesis's tables"
	say "The seed thesis's single-host tables 5.1–5.3 (its chapter 5), for Loupe's triggered capture, in one run:" \
		"a veth pair between two network namespaces, clients in A, servers and the agent in B (the agent on B's veth," \
		"ingress and egress). Configurations: **untraced** (nothing attached); **hooks only**, the empty TC program" \
		"(\`hookbench attach\`, as in section 1: \`loupe run\` has no switch that turns flows off); **flows**, the agent" \
		"as it runs by default (\`loupe run --iface VETH --store DIR\`); **flows + trigger**, the same with" \
		"\`--capture-dir\` on a tmpfs (/dev/shm), i.e. the default trigger \`http.status=500-599\` and its default limits" \
		"(10 000 packets, 64 MB, 5 min per trace); in b), also **flows + trigger, mirror only**: \`--mirror IF\` to a veth" \
		"in B that nothing reads, no \`--capture-dir\`, as the thesis's trigger mirrored and wrote no file." \
		"Every agent also runs with \`--control none --pin-dir none\`, so that" \
		"it never meets another agent on this machine; each run starts a fresh agent, store and capture directory." \
		"" \
		"Scaled from the thesis (8 threads; iperf3 60 s with \`-Z -O 10\`; h2load \`-D 60 -c 10 -m 1 -N 15 -T 15 --h1\`" \
		"against nginx with 2 workers; 801 runs, medians) to this 2-core machine: nginx has 1 worker, pinned to CPU 0," \
		"and h2load 1 thread of 10 clients, pinned to CPU 1 (on a veth a packet's receive path runs on the sender's CPU," \
		"so each side carries its peer's hook); iperf3 pins both ends to CPU 0 (\`-A 0,0\`). Runs of a few seconds," \
		"configurations alternating within each round, each round starting with the next configuration; medians over the rounds." \
		"" \
		"Machine load: \`uptime\`'s load average $CAP_LOAD_BEFORE before the run, $CAP_LOAD_AFTER after it (both include" \
		"whatever ran in the minutes before); CPU busy with other work, of both CPUs, in the 2 s before the run $CAP_BUSY_BEFORE %," \
		"in the 2 s after it $CAP_BUSY_AFTER %, and in 0.5 s samples before each round of a) and b) (below). Whole benchmark: $CAP_SECONDS s."
	local busiest
	busiest=$(cat "$WORK/cap-iperf-load.txt" "$WORK/cap-http-load.txt" | awk -v a="$CAP_BUSY_BEFORE" -v b="$CAP_BUSY_AFTER" \
		'BEGIN {m = (a > b) ? a : b} $2 > m {m = $2} END {print m}')
	if ((busiest > 10)); then
		say "**This run shared the machine with other work** (up to $busiest % of the CPUs busy in those samples): the" \
			"alternation spreads that noise over every configuration, but single runs vary more than on an idle machine;" \
			"the per-round figures show how much."
	else
		say "No other work was seen on the machine in those samples (at most $busiest % of the CPUs busy)."
	fi

	# a)
	tsv=$WORK/cap-iperf.tsv
	say "" "### a) iperf3 TCP throughput (thesis table 5.1)" "" \
		"$IPERF_ROUNDS rounds × 4 configurations × $IPERF_SECS s (after 1 s omitted), zero-copy sender as in the thesis" \
		"(CPU busy with other work, sampled for 0.5 s before each round: $(awk '{printf "%s%s %%", (n++ ? ", " : ""), $2}' "$WORK/cap-iperf-load.txt"))." "" \
		'```' \
		"ip netns exec B iperf3 -s -B 198.18.0.2 --forceflush" \
		"${IPERF_CLIENT[*]/$NS_A/A}" \
		"ip netns exec B hookbench attach -iface VETH_B                                                # hooks only" \
		"ip netns exec B loupe run --iface VETH_B --control none --pin-dir none --store DIR                # flows" \
		"ip netns exec B loupe run --iface VETH_B --control none --pin-dir none --store DIR --capture-dir /dev/shm/...   # flows + trigger" \
		'```' "" \
		"| configuration | runs (Gbit/s) | median (Gbit/s) | ratio to untraced (medians) | per-round ratio to untraced, median (min–max) | retransmits | thesis |" \
		"| --- | --- | ---: | ---: | ---: | ---: | ---: |"
	b=$(awk -F'\t' '$2 == "untraced" {print $3}' "$tsv" | median)
	for mode in untraced hooks flows trigger; do
		v=$(awk -F'\t' -v c="$mode" '$2 == c {print $3}' "$tsv" | median)
		runs=$(awk -F'\t' -v c="$mode" '$2 == c {printf "%s%.2f", (n++ ? ", " : ""), $3}' "$tsv")
		read -r pr lo hi < <(per_round "$tsv" 2 3 "$mode" untraced)
		say "| $(mode_name "$mode") | $runs | $(fmt %.2f "$v") | $(fmt %.3f "$(calc "$v / $b")") | $(fmt %.3f "$pr") ($(fmt %.3f "$lo")–$(fmt %.3f "$hi")) | $(awk -F'\t' -v c="$mode" '$2 == c {s += $4} END {printf "%.0f", s}' "$tsv") | $(thesis_51 "$mode") |"
		[[ $mode != trigger ]] || IPERF_TRIGGER=$(calc "$v / $b")
	done
	say "" "With the trigger on, the agent scanned a median of" \
		"$(awk -F'\t' '$2 == "trigger" {print $5}' "$tsv" | median | xargs printf '%.0f') TCP segments with payload per run," \
		"$(awk -F'\t' '$2 == "trigger" && $5 > 0 {print $6 / $5}' "$tsv" | median | xargs printf '%.0f') bytes each" \
		"(GSO super-packets, scanned whole), and fired $(awk -F'\t' '$2 == "trigger" {s += $7} END {printf "%.0f", s}' "$tsv") triggers in all." \
		"The thesis measured 97.7 % (qdiscs only) and 89.7 % (traced) of untraced over 801 runs of 60 s."

	# b)
	tsv=$WORK/cap-http.tsv
	say "" "### b) HTTP requests/s and request time (thesis tables 5.2 and 5.3)" "" \
		"nginx 1.22 (Debian nginx-light) in B with the thesis's locations; h2load (Debian nghttp2-client) from A," \
		"$HTTP_SECS s per run after a 1 s warm-up, $HTTP_ROUNDS rounds × 2 error rates × 3 configurations. Request times are the" \
		"per-request durations of h2load's \`--log-file\` (measured requests only), nearest-rank percentiles per run;" \
		"requests/s is h2load's own figure for the measured period. Each cell is the median over the rounds (the thesis" \
		"took medians over its runs too); in parentheses, and in the per-round column, the median over the rounds of the" \
		"configuration's value divided by the untraced run's of the same round. The three configurations of a round run" \
		"within about 20 s of each other, so that ratio is what the targets are judged on: other work on this machine" \
		"comes and goes, and moves the plain medians (CPU busy with other work, sampled for 0.5 s before each round:" \
		"$(awk '{printf "%s%s %%", (n++ ? ", " : ""), $2}' "$WORK/cap-http-load.txt"))." "" \
		'```' \
		"$H2LOAD_SHOWN" \
		"taskset -c 0 ip netns exec B nginx -c nginx.conf" \
		'```' "" "nginx.conf:" "" '```' "$(sed "s|$WORK/nginx|DIR|g" "$NGINX_CONF")" '```'
	local e ptsv
	for err in 0 100; do
		[[ $err == 0 ]] && e="0 % errors (/foo, 200; table 5.2)" || e="100 % errors (/bar, 500; table 5.3)"
		ptsv=$WORK/cap-http-$err.tsv
		awk -F'\t' -v e="$err" '$2 == e' "$tsv" >"$ptsv"
		say "" "**$e**" "" \
			"| configuration | runs (requests/s) | requests/s | per-round ratio to untraced, median (min–max) | ratio of the medians | p50 (ms) | p90 (ms) | p99 (ms) | p99.9 (ms) | p99.99 (ms) | agent CPU s per run |" \
			"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
		b=$(awk -F'\t' '$3 == "untraced" {print $4}' "$ptsv" | median)
		for mode in untraced flows trigger mirror; do
			v=$(awk -F'\t' -v c="$mode" '$3 == c {print $4}' "$ptsv" | median)
			runs=$(awk -F'\t' -v c="$mode" '$3 == c {printf "%s%.0f", (n++ ? ", " : ""), $4}' "$ptsv")
			read -r pr lo hi < <(per_round "$ptsv" 3 4 "$mode" untraced)
			local cells=""
			for col in 7 8 9 10 11; do
				p=$(awk -F'\t' -v c="$mode" -v k="$col" '$3 == c {print $k}' "$ptsv" | median)
				read -r q _ < <(per_round "$ptsv" 3 "$col" "$mode" untraced)
				cells+=" $(awk -v v="$p" -v q="$q" 'BEGIN {printf "%.3f (%.2f)", v / 1000, q}') |"
				if [[ $mode == trigger && $err == 100 && $col == 7 ]]; then
					HTTP_P50_ROUND=$q
					HTTP_P50_MEDIANS=$(calc "$p / $(awk -F'\t' '$3 == "untraced" {print $7}' "$ptsv" | median)")
				fi
				if [[ $mode == mirror && $err == 100 && $col == 7 ]]; then
					MIRROR_P50_ROUND=$q
					MIRROR_P50_MEDIANS=$(calc "$p / $(awk -F'\t' '$3 == "untraced" {print $7}' "$ptsv" | median)")
				fi
			done
			q=$(awk -F'\t' -v c="$mode" '$3 == c {print $13}' "$ptsv" | median)
			[[ $mode != untraced ]] || q="–"
			say "| $(mode_name "$mode") | $runs | $(fmt %.0f "$v") | $(fmt %.3f "$pr") ($(fmt %.3f "$lo")–$(fmt %.3f "$hi")) | $(fmt %.3f "$(calc "$v / $b")") |$cells $([[ $q == – ]] && echo – || fmt %.2f "$q") |"
			if [[ $mode == trigger && $err == 100 ]]; then
				HTTP_RPS_ROUND=$pr HTTP_RPS_MEDIANS=$(calc "$v / $b")
			fi
			if [[ $mode == mirror && $err == 100 ]]; then
				MIRROR_RPS_ROUND=$pr MIRROR_RPS_MEDIANS=$(calc "$v / $b")
			fi
		done
		say "" "Requests measured per run (median): $(awk -F'\t' '{print $5}' "$ptsv" | median | xargs printf '%.0f');" \
			"requests answered with another status than expected, all runs: $(awk -F'\t' '{s += $6} END {printf "%.0f", s}' "$ptsv")."
	done
	say "" "What the trigger did in those runs (flows + trigger; medians per run; packets through B's veth counted by the interface, rx + tx," \
		"warm-up and connection set-up included):" "" \
		"| errors | packets through the veth | triggers (traces) | packets written to pcapng | written / through the veth | traces ended by a limit | lost, all runs (datapath / reader) |" \
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
	for err in 0 100; do
		say "| $err % | $(col_median "$tsv" "$err" trigger 12) | $(col_median "$tsv" "$err" trigger 14) | $(col_median "$tsv" "$err" trigger 15) | $(awk -F'\t' -v e="$err" '$2 == e && $3 == "trigger" && $12 > 0 {print 100 * $15 / $12}' "$tsv" | median | xargs printf '%.1f') % | $(col_median "$tsv" "$err" trigger 18) | $(awk -F'\t' -v e="$err" '$2 == e && $3 == "trigger" {s += $16; r += $17} END {printf "%.0f / %.0f", s, r}' "$tsv") |"
	done
	say "" "The thesis (traced against untraced, medians of 801 runs): requests/s 97 % at 0 % errors and 89 % at 100 %; p50 +6 % and +13 %."
	say "" "Targets, flows + trigger at 100 % errors against untraced (per-round ratios; the ratio of the plain medians in brackets):" \
		"requests/s ≥ 0.98 ×: **$(awk -v x="$HTTP_RPS_ROUND" 'BEGIN {print (x >= 0.98 ? "met" : "not met")}')** ($(fmt %.3f "$HTTP_RPS_ROUND") × [$(fmt %.3f "$HTTP_RPS_MEDIANS") ×]);" \
		"p50 ≤ +5 %: **$(awk -v x="$HTTP_P50_ROUND" 'BEGIN {print (x <= 1.05 ? "met" : "not met")}')** ($(awk -v x="$HTTP_P50_ROUND" 'BEGIN {printf "%+.1f", 100 * (x - 1)}') % [$(awk -v x="$HTTP_P50_MEDIANS" 'BEGIN {printf "%+.1f", 100 * (x - 1)}') %])." \
		"" "The same targets for flows + trigger mirroring only, the thesis's own set-up (its trigger mirrored to a debug interface and wrote no file):" \
		"requests/s ≥ 0.98 ×: **$(awk -v x="$MIRROR_RPS_ROUND" 'BEGIN {print (x >= 0.98 ? "met" : "not met")}')** ($(fmt %.3f "$MIRROR_RPS_ROUND") × [$(fmt %.3f "$MIRROR_RPS_MEDIANS") ×]);" \
		"p50 ≤ +5 %: **$(awk -v x="$MIRROR_P50_ROUND" 'BEGIN {print (x <= 1.05 ? "met" : "not met")}')** ($(awk -v x="$MIRROR_P50_ROUND" 'BEGIN {printf "%+.1f", 100 * (x - 1)}') % [$(awk -v x="$MIRROR_P50_MEDIANS" 'BEGIN {printf "%+.1f", 100 * (x - 1)}') %])."

	# c)
	tsv=$WORK/cap-bpf.tsv
	say "" "### c) BPF ns per packet on the HTTP traffic (bpf_stats)" "" \
		"The same h2load runs ($BPF_SECS s, $BPF_ROUNDS rounds, configurations alternating) with \`kernel.bpf_stats_enabled=1\`" \
		"(restored afterwards): Δrun_time_ns / Δrun_cnt of the programs attached to B's veth over the h2load run" \
		"(\`hookbench stats\`), at ingress (requests), egress (responses, where the status lines are) and both. bpf_stats adds" \
		"its own cost to every run; the empty program shows it. Medians over the rounds." "" \
		"| configuration | errors | ingress ns/packet | egress ns/packet | both | both − empty program | packets through the hooks per run | packets captured per run | requests/s (bpf_stats on) |" \
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	local em
	for err in 0 100; do
		em=$(awk -F'\t' -v e="$err" '$2 == e && $3 == "hooks" && $9 > 0 {print $10 / $9}' "$tsv" | median)
		for mode in hooks flows trigger; do
			local ing egr all
			ing=$(awk -F'\t' -v e="$err" -v c="$mode" '$2 == e && $3 == c && $5 > 0 {print $6 / $5}' "$tsv" | median)
			egr=$(awk -F'\t' -v e="$err" -v c="$mode" '$2 == e && $3 == c && $7 > 0 {print $8 / $7}' "$tsv" | median)
			all=$(awk -F'\t' -v e="$err" -v c="$mode" '$2 == e && $3 == c && $9 > 0 {print $10 / $9}' "$tsv" | median)
			[[ $mode != hooks ]] || ing="–" egr="–"
			say "| $(mode_name "$mode") | $err % | $([[ $ing == – ]] && echo – || fmt %.1f "$ing") | $([[ $egr == – ]] && echo – || fmt %.1f "$egr") | $(fmt %.1f "$all") | $([[ $mode == hooks ]] && echo – || fmt %.1f "$(calc "$all - $em")") | $(awk -F'\t' -v e="$err" -v c="$mode" '$2 == e && $3 == c {print $9}' "$tsv" | median | xargs printf '%.0f') | $([[ $mode == trigger ]] && awk -F'\t' -v e="$err" '$2 == e && $3 == "trigger" {print $11}' "$tsv" | median | xargs printf '%.0f' || echo –) | $(awk -F'\t' -v e="$err" -v c="$mode" '$2 == e && $3 == c {print $4}' "$tsv" | median | xargs printf '%.0f') |"
		done
	done
	say "" "The empty program is attached once for both directions, so only its total is known."

	# d)
	tsv=$WORK/cap-rate.tsv
	say "" "### d) Capture throughput: the agent's pcapng writer against tcpdump -w" "" \
		"One TCP connection replayed into A's end of the pair (\`gentrace -kind http500\`: the server's HTTP/1.1 500 response" \
		"header, then data segments of one frame size, looped), by tcpreplay pinned to CPU 1 at fixed rates for $RATE_SECS s;" \
		"B's stack drops the frames after its hook and packet sockets saw them (foreign MACs). Alone in turn on B's veth:" \
		"the agent with the trigger's limits lifted, so the whole connection is captured from its status line on, files" \
		"on /dev/shm, default 4 MiB perf buffer per CPU; or tcpdump writing the connection to a file on /dev/shm" \
		"(libpcap's default 2 MiB buffer), the order alternating. Lost = the agent's" \
		"\`loupe_capture_datapath_events_total{event=\"packets_lost\"}\` (the program's output refused: buffer full) and, apart," \
		"\`loupe_capture_reader_lost_total\` (the lost records the kernel reported to the reader: the same losses seen from" \
		"userspace), or tcpdump's \"dropped by kernel\"; written = \`loupe_capture_packets_written_total\` once it stopped growing, or tcpdump's" \
		"\"packets captured\"; in the file = packets counted in the pcapng/pcap files afterwards. A rate is held without" \
		"loss when tcpreplay achieved it (≥ 99 %: the hook runs in the sender's softirq, so a slow hook slows the sender" \
		"instead of dropping) and every packet sent was written." "" \
		'```' \
		"gentrace -kind http500 -packets 10000 -min 128|1514 -out http500.pcap" \
		"taskset -c 1 ip netns exec A tcpreplay -i VETH_A --preload-pcap --pps RATE|--topspeed --loop N --duration $RATE_SECS http500.pcap" \
		"ip netns exec B loupe run --iface VETH_B --control none --pin-dir none --store DIR --capture-dir /dev/shm/... \\" \
		"    --trigger '$RATE_TRIGGER' --capture-max-size 0 --capture-max-files 0" \
		"ip netns exec B tcpdump -i VETH_B -n -w /dev/shm/.../tcpdump.pcap '$RATE_FILTER'" \
		'```' "" \
		"| frame (bytes) | rate asked (pps) | capture | rate achieved (pps) | packets sent | received by B's veth | written | in the file | lost | lost, reader's count | written / sent | held without loss |" \
		"| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
	awk -F'\t' '{
		ok = ($7 == $4 && $8 == $4 && $9 == 0)
		held = ($2 == "topspeed") ? (ok ? "yes (top speed)" : "no") : ((ok && $5 >= 0.99 * $2) ? "yes" : "no")
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f %% | %s |\n", $1, $2, ($3 == "loupe" ? "loupe (pcapng)" : "tcpdump -w"), $5, $4, $6, $7, $8, $9, $10, 100 * $7 / $4, held
	}' "$tsv" >>"$SECTION"
	# Every packet sent is either written or lost, once.
	local unbalanced
	unbalanced=$(awk -F'\t' '$7 + $9 != $4 || $8 != $7 {printf "%s%s B at %s (%s: sent %s, written %s, in the file %s, lost %s)", (n++ ? "; " : ""), $1, $2, $3, $4, $7, $8, $9}' "$tsv")
	say "" "Accounting: sent = written + lost, and the files hold what was written, $([[ -z $unbalanced ]] && echo "in every run." || echo "**except in**: $unbalanced.")"
	say ""
	local size tool best
	for size in $(cut -f1 "$tsv" | uniq); do
		for tool in loupe tcpdump; do
			# "RATE top" when top speed (what the sender reached with this
			# capture attached) beat every fixed rate held.
			best=$(awk -F'\t' -v s="$size" -v t="$tool" '$1 == s && $3 == t && $7 == $4 && $8 == $4 && $9 == 0 {
				top = ($2 == "topspeed"); r = top ? $5 : (($5 >= 0.99 * $2) ? $2 : 0)
				if (r > b) { b = r; bt = top } } END {printf "%.0f %s", b, (bt ? "top" : "")}' "$tsv")
			say "- $size-byte frames, $([[ $tool == loupe ]] && echo "the agent" || echo tcpdump): highest rate held without loss:" \
				"$(case $best in 0*) echo "none of those tested" ;; *top) echo "${best% top} pps, at top speed (the most the sender reached with it attached)" ;; *) echo "${best% } pps" ;; esac)."
			# The fixed rates under it that were not held, so that the
			# line above is not read as "every rate below held".
			lower=$(awk -F'\t' -v s="$size" -v t="$tool" -v b="${best% top}" '$1 == s && $3 == t && $2 != "topspeed" && $2 + 0 < b + 0 &&
				!($7 == $4 && $8 == $4 && $9 == 0 && $5 >= 0.99 * $2) {printf "%s%s pps (%s lost, %s pps achieved)", sep, $2, $9, $5; sep = "; "}' "$tsv")
			[[ -z $lower ]] || say "  Below it, not held: $lower."
		done
	done
	section_end
}

mode_name() {
	case $1 in
	untraced) echo untraced ;;
	hooks) echo "hooks only (empty program)" ;;
	flows) echo flows ;;
	trigger) echo "flows + trigger" ;;
	mirror) echo "flows + trigger, mirror only" ;;
	esac
}

thesis_51() {
	case $1 in
	untraced) echo "28.9 Gbit/s, 100 %" ;;
	hooks) echo "97.7 % (qdiscs only)" ;;
	flows) echo "–" ;;
	trigger) echo "89.7 % (traced)" ;;
	esac
}

# per_round TSV MODECOL VALCOL MODE BASE: median, min and max over the
# rounds of MODE's value divided by BASE's in the same round (column 1).
per_round() {
	awk -F'\t' -v mc="$2" -v vc="$3" -v m="$4" -v b="$5" '
		$mc == b {u[$1] = $vc} $mc == m {x[$1] = $vc}
		END {for (r in x) if (u[r] > 0) print x[r] / u[r]}' "$1" | sort -g |
		awk '{x[NR] = $1} END {
			if (NR == 0) { print "nan nan nan"; exit }
			m = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
			printf "%.10g %.10g %.10g\n", m, x[1], x[NR]
		}'
}

# col_median TSV ERR MODE COL: median of a column of the HTTP table.
col_median() {
	awk -F'\t' -v e="$2" -v c="$3" -v k="$4" '$2 == e && $3 == c {print $k}' "$1" | median | xargs printf '%.0f'
}
