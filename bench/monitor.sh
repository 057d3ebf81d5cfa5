# Benchmark 3: monitoring rate under small packets (the netobserv paper's
# Fig. 7 and Table 1). A generated trace of many small UDP and TCP flows is
# replayed with tcpreplay at fixed rates into the A end of a veth pair; one
# monitor at a time watches the B end, in namespace B: Loupe, tcpdump, or
# pmacctd (libpcap, print plugin). Monitoring rate = packets the monitor
# accounted / packets sent. Sourced by bench/run.sh.

bench_monitor() {
	local rates=(${BENCH_MONITOR_RATES:-50000 100000 200000 400000 topspeed})
	local rate tool loops pid watcher store rx0 rx1 sent pps acc note cpu hwm speed
	local tsv=$WORK/monitor.tsv pcap=$WORK/mixed.pcap
	"$BIN/gentrace" -kind mixed -flows 5000 -packets 100000 -min 64 -max 128 -seed 1 -out "$pcap" >&2
	new_pair
	cat >"$WORK/pmacctd.conf" <<-EOF
		daemonize: false
		pcap_interface: $IF_B
		aggregate: src_host, dst_host, src_port, dst_port, proto
		plugins: print
		print_output: json
		print_output_file: $WORK/pmacctd.json
		print_refresh_time: 3600
	EOF
	: >"$tsv"
	for rate in "${rates[@]}"; do
		# About 5 s of traffic per run (at least the whole trace once).
		if [[ $rate == topspeed ]]; then
			loops=20 speed=(--topspeed)
		else
			loops=$((rate * 5 / 100000)) speed=(--pps "$rate")
			((loops >= 1)) || loops=1
		fi
		for tool in loupe tcpdump pmacctd; do
			store=$WORK/store-monitor-$rate
			rm -f "$WORK/pmacctd.json"
			case $tool in
			loupe)
				start_agent pid "$NS_B" "$WORK/monitor-$tool.log" --iface "$IF_B" --store "$store"
				;;
			tcpdump)
				start_bg pid TERM "$WORK/monitor-$tool.log" ip netns exec "$NS_B" tcpdump -i "$IF_B" -w /dev/null
				wait_log "$WORK/monitor-$tool.log" "listening on" 10 "$pid"
				;;
			pmacctd)
				# pmacctd ignores SIGTERM: SIGINT stops it and makes
				# the print plugin write its cache.
				start_bg pid INT "$WORK/monitor-$tool.log" ip netns exec "$NS_B" pmacctd -f "$WORK/pmacctd.conf"
				wait_log "$WORK/monitor-$tool.log" "JSON: setting object handlers" 10 "$pid"
				sleep 0.5
				;;
			esac
			watch_usage watcher "$pid" "$WORK/usage.txt"
			rx0=$(rx_packets "$NS_B" "$IF_B")
			taskset -c 1 ip netns exec "$NS_A" tcpreplay -i "$IF_A" --preload-pcap "${speed[@]}" --loop "$loops" --duration 60 "$pcap" >"$WORK/replay.log" 2>&1
			# Let the monitor catch up with what is queued for it.
			sleep 2
			rx1=$(rx_packets "$NS_B" "$IF_B")
			if [[ $tool == loupe ]]; then
				metric "$NS_B" loupe_dropped_packets_total >"$WORK/dropped.txt"
				stop_agent "$pid"
			else
				stop_bg "$pid" 30
			fi
			read -r cpu hwm < <(usage_of "$watcher" "$WORK/usage.txt")
			sent=$(awk '/Actual:/ {print $2}' "$WORK/replay.log")
			pps=$(awk '/Rated:/ {printf "%.0f", $6}' "$WORK/replay.log")
			case $tool in
			loupe)
				acc=$(store_packets "$store" "$IF_B" ingress)
				note="$(cat "$WORK/dropped.txt") dropped (loupe_dropped_packets_total)"
				;;
			tcpdump)
				acc=$(awk '/packets captured/ {print $1}' "$WORK/monitor-$tool.log")
				note="$(awk '/dropped by kernel/ {print $1}' "$WORK/monitor-$tool.log") dropped by kernel"
				;;
			pmacctd)
				acc=$(python3 -c '
import json, sys
print(sum(json.loads(l)["packets"] for l in open(sys.argv[1]) if l.strip()))' "$WORK/pmacctd.json")
				note="libpcap: $(grep -o 'received_packets=[0-9]* dropped_packets=[0-9]*' "$WORK/monitor-$tool.log" | tr '_' ' ')"
				;;
			esac
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rate" "$pps" "$tool" "$sent" "$((rx1 - rx0))" "$acc" "$cpu" "$hwm" "$note" >>"$tsv"
			echo "bench: monitor $rate pps, $tool: $acc of $sent packets ($pps pps achieved), $cpu CPU s, $hwm kB peak; $note" >&2
		done
	done
	del_pair

	section_begin monitor "3. Monitoring rate under small packets: Loupe, tcpdump, pmacctd"
	say "Trace: 100 000 packets over 5 000 UDP and TCP flows, 64–128-byte frames, from seed 1 (\`gentrace -kind mixed\`)." \
		"tcpreplay (pinned to CPU 1) replays it from namespace A into a veth pair, about 5 s per run (the trace looped), at each rate;" \
		"the monitor runs alone in namespace B on the other end (started before, stopped 2 s after the replay)." \
		"The frames keep the pcap's MACs, so B's stack drops them after the hooks and the packet sockets saw them." \
		"Accounted: Loupe = sum of the packets of its stored flows on B's veth (ingress); tcpdump = \"packets captured\";" \
		"pmacctd = sum of the packets of its print plugin's records. CPU = user + system seconds of the monitor's processes," \
		"peak RSS = VmHWM (pmacctd: core + plugin summed), both polled every 100 ms by \`procstat\`." \
		"Loupe's BPF program runs in the softirq of the sending CPU, which this CPU time does not include (see section 2)." \
		"" \
		'```' \
		"gentrace -kind mixed -flows 5000 -packets 100000 -min 64 -max 128 -seed 1 -out mixed.pcap" \
		"taskset -c 1 ip netns exec $NS_A tcpreplay -i $IF_A --preload-pcap --pps RATE|--topspeed --loop LOOPS --duration 60 mixed.pcap" \
		"ip netns exec $NS_B loupe run --iface $IF_B --store DIR" \
		"ip netns exec $NS_B tcpdump -i $IF_B -w /dev/null" \
		"ip netns exec $NS_B pmacctd -f pmacctd.conf   # stopped with SIGINT" \
		'```' \
		"" \
		"pmacctd.conf:" \
		"" \
		'```' \
		"$(sed "s|$WORK/||" "$WORK/pmacctd.conf")" \
		'```' \
		"" \
		"| rate asked (pps) | rate achieved (pps) | monitor | packets sent | received by B's veth | accounted | monitoring rate | CPU (s) | peak RSS (MiB) | notes |" \
		"| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
	local line worst=100
	while IFS=$'\t' read -r rate pps tool sent rx acc cpu hwm note; do
		local pct
		pct=$(calc "100 * $acc / $sent")
		say "| $rate | $pps | $tool | $sent | $rx | $acc | $(fmt %.2f "$pct") % | $cpu | $(fmt %.1f "$(calc "$hwm / 1024")") | $note |"
		if [[ $tool == loupe ]]; then
			worst=$(awk -v a="$worst" -v b="$pct" 'BEGIN {print (b < a ? b : a)}')
		fi
	done <"$tsv"
	say "" \
		"Target: 100 % monitoring rate for Loupe at every rate tested: **$(awk -v w="$worst" 'BEGIN {print (w == 100 ? "met" : "not met")}')** (lowest $(fmt %.2f "$worst") %)."
	section_end
}
