# Benchmark 2: average BPF run time per packet, from the kernel's bpf_stats
# (kernel.bpf_stats_enabled, restored afterwards by the EXIT trap), under a
# flood of 64-byte UDP frames: tcpreplay --topspeed of a generated pcap into
# one end of a veth pair, the program at the ingress hook of the other end.
# Programs: the empty one (the cost of the hook and of bpf_stats itself),
# the agent's flow program with per-CPU and with shared tables, and, when
# run.sh built one (BENCH_BASE), the agent of an earlier commit with per-CPU
# tables, so that a change is judged against what it replaced in the same
# run; on 1 flow and on 10 000 flows. Sourced by bench/run.sh.

bench_bpfstats() {
	local rounds=${BENCH_ROUNDS:-3} loops=300 flows cfg r pid store s0 s1 c t sent pps accounted
	local tsv=$WORK/bpfstats.tsv cfgs=(empty percpu shared) counts=(${BENCH_BPFSTATS_FLOWS:-1 10000})
	[[ -z ${BENCH_BASE:-} ]] || cfgs=(empty base percpu shared)
	for flows in "${counts[@]}"; do
		"$BIN/gentrace" -kind udp64 -flows "$flows" -packets 10000 -seed 1 -out "$WORK/udp64-$flows.pcap" >&2
	done
	new_pair
	local replay=(taskset -c 1 ip netns exec "$NS_A" tcpreplay -i "$IF_A" --preload-pcap --topspeed --loop "$loops" --duration 30)
	bpf_stats_enable
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		for flows in "${counts[@]}"; do
			for cfg in "${cfgs[@]}"; do
				store=$WORK/store-bpfstats-$r-$flows-$cfg
				if [[ $cfg == empty ]]; then
					start_bg pid TERM "$WORK/hook.log" ip netns exec "$NS_B" "$BIN/hookbench" attach -iface "$IF_B"
					wait_log "$WORK/hook.log" '^attached' 10 "$pid"
				elif [[ $cfg == base ]]; then
					start_bg pid TERM "$WORK/agent-base.log" ip netns exec "$NS_B" "$BIN/loupe-base" run --iface "$IF_B" --store "$store" --map-type percpu
					wait_log "$WORK/agent-base.log" 'msg="loupe running"' 30 "$pid"
				else
					start_agent pid "$NS_B" "$WORK/agent-bpfstats.log" --iface "$IF_B" --store "$store" --map-type "$cfg"
				fi
				s0=$(prog_stats "$NS_B" "$IF_B")
				"${replay[@]}" "$WORK/udp64-$flows.pcap" >"$WORK/replay.log" 2>&1
				s1=$(prog_stats "$NS_B" "$IF_B")
				if [[ $cfg == empty ]]; then
					stop_bg "$pid"
					accounted=-
				else
					stop_agent "$pid"
					accounted=$(store_packets "$store" "$IF_B" ingress)
				fi
				sent=$(awk '/Actual:/ {print $2}' "$WORK/replay.log")
				pps=$(awk '/Rated:/ {print $6}' "$WORK/replay.log")
				read -r c t < <(echo "$s0 $s1" | awk '{printf "%.0f %.0f\n", $3 - $1, $4 - $2}')
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$flows" "$cfg" "$c" "$t" "$sent" "$pps" "$accounted" >>"$tsv"
				echo "bench: bpfstats round $r, $flows flows, $cfg: $(calc "$t / $c") ns/packet over $c runs ($sent sent at $pps pps)" >&2
			done
		done
	done
	bpf_stats_restore
	del_pair

	section_begin bpfstats "2. Average BPF run time per packet (bpf_stats), 64-byte UDP flood"
	say "tcpreplay (pinned to CPU 1) sends a pcap of 10 000 64-byte UDP/IPv4 frames (1 flow, or 10 000 flows) $loops times at top speed" \
		"into the A end of a veth pair; the program sits at the ingress hook of the B end (TCX), in namespace B." \
		"ns/packet = Δrun_time_ns / Δrun_cnt of the ingress program, read from the kernel with \`kernel.bpf_stats_enabled=1\`" \
		"(restored to its previous value afterwards). The empty program is measured the same way: it is the cost of the hook" \
		"plus what bpf_stats itself adds to every run, so \"agent − empty\" is the flow program's own cost." \
		"$rounds rounds, configurations in alternation; mean ± sample stdev over the rounds." \
		"" \
		'```' \
		"gentrace -kind udp64 -flows 1|10000 -packets 10000 -seed 1 -out udp64-FLOWS.pcap" \
		"sysctl -w kernel.bpf_stats_enabled=1" \
		"ip netns exec $NS_B hookbench attach -iface $IF_B                                  # empty" \
		"ip netns exec $NS_B loupe run --iface $IF_B --store DIR --map-type percpu|shared  # agent" \
		"ip netns exec $NS_B loupe-base run --iface $IF_B --store DIR --map-type percpu    # agent at ${BENCH_BASE:-(none)}" \
		"${replay[*]} udp64-FLOWS.pcap" \
		"ip netns exec $NS_B hookbench stats -iface $IF_B   # before and after the replay" \
		'```' \
		"" \
		"| program | flows | ns/packet (mean ± sd) | agent − empty (ns) | program runs / frames sent | replay rate (pps) | agent's stored packets / frames sent |" \
		"| --- | ---: | ---: | ---: | --- | ---: | --- |"
	local m sd em runs sentsum ppsm acc label worst=0
	for flows in "${counts[@]}"; do
		read -r em _ < <(awk -F'\t' -v f="$flows" '$2 == f && $3 == "empty" {print $5 / $4}' "$tsv" | mean_sd)
		for cfg in "${cfgs[@]}"; do
			read -r m sd < <(awk -F'\t' -v f="$flows" -v c="$cfg" '$2 == f && $3 == c {print $5 / $4}' "$tsv" | mean_sd)
			runs=$(awk -F'\t' -v f="$flows" -v c="$cfg" '$2 == f && $3 == c {s += $4} END {printf "%.0f", s}' "$tsv")
			sentsum=$(awk -F'\t' -v f="$flows" -v c="$cfg" '$2 == f && $3 == c {s += $6} END {printf "%.0f", s}' "$tsv")
			ppsm=$(awk -F'\t' -v f="$flows" -v c="$cfg" '$2 == f && $3 == c {print $7}' "$tsv" | mean_sd | awk '{printf "%.0f", $1}')
			if [[ $cfg == empty ]]; then
				label="empty program" acc="–"
				say "| $label | $flows | $(fmt %.1f "$m") ± $(fmt %.1f "$sd") | – | $runs / $sentsum | $ppsm | $acc |"
			else
				label="agent, $cfg tables"
				[[ $cfg != base ]] || label="agent at $BENCH_BASE (before), percpu tables"
				acc="$(awk -F'\t' -v f="$flows" -v c="$cfg" '$2 == f && $3 == c {s += $8} END {printf "%.0f", s}' "$tsv") / $sentsum"
				say "| $label | $flows | $(fmt %.1f "$m") ± $(fmt %.1f "$sd") | $(fmt %.1f "$(calc "$m - $em")") | $runs / $sentsum | $ppsm | $acc |"
				[[ $cfg == base ]] || worst=$(awk -v a="$worst" -v b="$m" 'BEGIN {print (b > a ? b : a)}')
			fi
		done
	done
	say "" \
		"Target: ≤ 130 ns per packet for the agent (as measured, stats overhead included): **$(awk -v w="$worst" 'BEGIN {print (w <= 130 ? "met" : "not met")}')** (worst configuration $(fmt %.1f "$worst") ns)."
	if [[ -n ${BENCH_BASE:-} ]]; then
		local now nsd before bsd verdict
		for flows in "${counts[@]}"; do
			read -r now nsd < <(awk -F'\t' -v f="$flows" '$2 == f && $3 == "percpu" {print $5 / $4}' "$tsv" | mean_sd)
			read -r before bsd < <(awk -F'\t' -v f="$flows" '$2 == f && $3 == "base" {print $5 / $4}' "$tsv" | mean_sd)
			# Slower: by more than the rounds' spread (the two stdevs combined).
			verdict=$(awk -v a="$now" -v b="$before" -v x="$nsd" -v y="$bsd" \
				'BEGIN {d = sqrt(x * x + y * y); print (a <= b ? "not slower" : a - b <= d ? "not slower beyond the spread of the rounds (" d " ns)" : "slower")}')
			say "" "Flows alone, per-CPU tables, $flows flow(s): $(fmt %.1f "$now") ns now against $(fmt %.1f "$before") ns at $BENCH_BASE, ratio $(fmt %.3f "$(calc "$now / $before")"): **$verdict**."
		done
	fi
	section_end
}
