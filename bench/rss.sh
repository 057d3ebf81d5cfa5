# Benchmark 5: the agent's peak RSS (VmHWM) with 100 000 active flows: a
# trace of 100 000 distinct flows (one packet each) is replayed over and
# over into a veth pair while the agent, with its store, watches the other
# end. Run with the default flow budget (65 536: the flows past it go through
# the ring buffer and trigger early evictions) and with a budget that holds
# them all. Sourced by bench/run.sh.

bench_rss() {
	local secs=${BENCH_RSS_SECONDS:-30} rate=200000 budget pid watcher store rx0 rx1 sent acc cpu hwm
	local loops=$((secs * rate / 100000)) tsv=$WORK/rss.tsv pcap=$WORK/distinct.pcap
	local -a extra
	"$BIN/gentrace" -kind distinct -flows 100000 -min 64 -max 128 -seed 1 -out "$pcap" >&2
	new_pair
	local replay=(taskset -c 1 ip netns exec "$NS_A" tcpreplay -i "$IF_A" --preload-pcap --pps "$rate" --loop "$loops" --duration $((secs + 30)))
	: >"$tsv"
	for budget in default 131072; do
		store=$WORK/store-rss-$budget
		extra=()
		[[ $budget == default ]] || extra=(--flow-budget "$budget")
		start_agent pid "$NS_B" "$WORK/agent-rss-$budget.log" --iface "$IF_B" --store "$store" "${extra[@]}"
		watch_usage watcher "$pid" "$WORK/usage.txt"
		rx0=$(rx_packets "$NS_B" "$IF_B")
		"${replay[@]}" "$pcap" >"$WORK/replay.log" 2>&1
		sleep 1
		rx1=$(rx_packets "$NS_B" "$IF_B")
		local m_full m_timer m_rss m_dropped
		m_full=$(metric "$NS_B" 'loupe_evictions_total{reason="map_full"}')
		m_timer=$(metric "$NS_B" 'loupe_evictions_total{reason="timer"}')
		m_dropped=$(metric "$NS_B" loupe_dropped_packets_total)
		m_rss=$(metric "$NS_B" process_resident_memory_bytes)
		local split
		split=$(awk '/^RssAnon|^RssFile/ {printf "%s%.1f", (n++ ? " / " : ""), $2 / 1024}' "/proc/$pid/status")
		stop_agent "$pid"
		read -r cpu hwm < <(usage_of "$watcher" "$WORK/usage.txt")
		sent=$(awk '/Actual:/ {print $2}' "$WORK/replay.log")
		acc=$(store_packets "$store" "$IF_B" ingress)
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$budget" "$sent" "$((rx1 - rx0))" "$acc" "$cpu" "$hwm" \
			"$m_rss" "$m_full" "$m_timer" "$m_dropped" "$(du -sk "$store" | cut -f1)" "$split" >>"$tsv"
		echo "bench: rss budget $budget: peak $hwm kB, $cpu CPU s, $acc of $sent packets stored; evictions map_full=$m_full timer=$m_timer" >&2
	done
	del_pair

	section_begin rss "5. Agent RSS with 100 000 active flows"
	say "Trace: 100 000 distinct UDP and TCP flows, one 64–128-byte packet each, from seed 1 (\`gentrace -kind distinct\`)," \
		"replayed $loops times at $rate pps ($secs s) from namespace A into a veth pair: every flow is active in every 5 s" \
		"eviction interval (each sees 1 000 000 packets of the 100 000 flows). The agent runs in namespace B with its store" \
		"(and its default metrics listener); peak RSS = VmHWM, polled every 100 ms by \`procstat\` until the agent exited" \
		"(its shutdown flush included). The default flow budget (65 536) is below 100 000 flows: the flows past it go through" \
		"the ring buffer and trigger early (map_full) evictions; the second run has a budget that holds them all." \
		"" \
		'```' \
		"gentrace -kind distinct -flows 100000 -min 64 -max 128 -seed 1 -out distinct.pcap" \
		"ip netns exec $NS_B loupe run --iface $IF_B --store DIR [--flow-budget 131072]" \
		"${replay[*]} distinct.pcap" \
		'```' \
		"" \
		"| flow budget | packets sent | received by B's veth | stored by the agent | peak RSS, VmHWM (MiB) | RSS at the end, from /metrics (MiB) | RssAnon / RssFile at the end (MiB) | agent CPU (s) | evictions map_full / timer | dropped | store on disk (MB) |" \
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
	local worst=0 rx rss full timer dropped disk split
	while IFS=$'\t' read -r budget sent rx acc cpu hwm rss full timer dropped disk split; do
		[[ $budget == default ]] && budget="65536 (default)"
		say "| $budget | $sent | $rx | $acc | $(fmt %.1f "$(calc "$hwm / 1024")") | $(fmt %.1f "$(calc "$rss / 1048576")") | $split | $cpu | $full / $timer | $dropped | $(fmt %.1f "$(calc "$disk / 1024")") |"
		worst=$(awk -v a="$worst" -v b="$hwm" 'BEGIN {print (b > a ? b : a)}')
	done <"$tsv"
	say "" \
		"Target: peak RSS under 40 MB (40 000 000 bytes): **$(awk -v w="$worst" 'BEGIN {print (w * 1024 < 40e6 ? "met" : "not met")}')** (highest $(fmt %.1f "$(calc "$worst / 1024")") MiB)."
	section_end
}
