# Benchmark 11: the selective-measurement seed's Table 1 and Tables 2-3 on
# this machine, side by side in one run: the exact flow table, the sketch
# and the off-path ring buffer (the seed's eBPF hash, on-path SMON and
# off-path designs). Per design: BPF ns per packet (bpf_stats, the ingress
# program), the kernel memory of the datapath's maps, accuracy against the
# trace's truth, and the agent's CPU.
#
# Workloads (gentrace -kind zipf: heavy hitters and a long tail):
#   seed  2 550 flows (the seed's flows at 1 400 hosts), replayed at
#         160 000 packets/s, the seed's rate;
#   10x   25 500 flows at top speed (the machine's top rate is stated:
#         1.6 Mpps is out of reach of tcpreplay here);
#   1M    1 000 000 flows, 3 000 000 packets at top speed: accuracy on a
#         trace of a million flows.
# Designs:
#   empty   the empty program (the hook and bpf_stats' own cost);
#   exact   per-CPU tables that hold every flow (--flow-budget: the
#           workload's flows, at least 4096: the slot tables have twice
#           that many slots);
#   sketch  --memory 16MiB --flow-budget 16: every flow but 16 spills, so
#           a packet pays the sketch's insert (the seed's on-path SMON);
#   memory  --memory 16MiB: tables and sketch split the budget, what an
#           operator runs;
#   offpath --map-type ringbuf --ringbuf-size 8MiB: every packet to
#           userspace (the seed's off-path design).
# Knobs: BENCH_DESIGNS_ROUNDS (3), BENCH_DESIGNS_WORKLOADS ("seed 10x 1M").
# Sourced by bench/run.sh.

# exact's flow budget is set per workload: its flows, so that each CPU's
# table holds them all (the per-CPU slot tables size their slots at twice
# the budget, where a lookup stays fast: internal/datapath/slots.go).
# Every design runs flow accounting alone (the kernel signals and DNS off):
# the comparison is of the ways to count flows, and the budget of 16 MiB is
# then the flows' own.
FLOWS_ONLY="--signals-rtt=false --signals-retransmits=false --signals-drops=false --dns-enabled=false --dns-handshake-rtt=false"
declare -A DESIGN_ARGS=(
	[exact]="--map-type percpu $FLOWS_ONLY"
	[sketch]="--map-type percpu --memory 16MiB --flow-budget 16 $FLOWS_ONLY"
	[memory]="--map-type percpu --memory 16MiB $FLOWS_ONLY"
	[offpath]="--map-type ringbuf --ringbuf-size 8MiB $FLOWS_ONLY"
)
declare -A WORKLOAD_TRACE=([seed]="2550 200000" [10x]="25500 2000000" [1M]="1000000 3000000")
declare -A WORKLOAD_REPLAY=([seed]="--pps 160000 --loop 5" [10x]="--topspeed --loop 1" [1M]="--topspeed --loop 1")
declare -A WORKLOAD_LOOPS=([seed]=5 [10x]=1 [1M]=1)

# exact_budget WORKLOAD: the exact design's flow budget.
exact_budget() {
	local flows
	read -r flows _ <<<"${WORKLOAD_TRACE[$1]}"
	echo $((flows > 4096 ? flows : 4096))
}

bench_designs() {
	local rounds=${BENCH_DESIGNS_ROUNDS:-3} workloads=(${BENCH_DESIGNS_WORKLOADS:-seed 10x 1M})
	local tsv=$WORK/designs.tsv w d r pid watch store s0 s1 c t mem cpu acc sent pps flows packets
	for w in "${workloads[@]}"; do
		read -r flows packets <<<"${WORKLOAD_TRACE[$w]}"
		"$BIN/gentrace" -kind zipf -flows "$flows" -packets "$packets" -seed 1 -truth "$WORK/$w.truth" -out "$WORK/$w.pcap" >&2
	done
	new_pair
	bpf_stats_enable
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		for w in "${workloads[@]}"; do
			for d in empty exact sketch memory offpath; do
				store=$WORK/store-designs-$r-$w-$d
				mem=- cpu=- acc=-
				if [[ $d == empty ]]; then
					start_bg pid TERM "$WORK/hook.log" ip netns exec "$NS_B" "$BIN/hookbench" attach -iface "$IF_B"
					wait_log "$WORK/hook.log" '^attached' 10 "$pid"
				else
					# shellcheck disable=SC2086
					local extra=()
					[[ $d != exact ]] || extra=(--flow-budget "$(exact_budget "$w")")
					start_agent pid "$NS_B" "$WORK/agent-designs.log" --iface "$IF_B" --store "$store" --cache-active-timeout 2s ${DESIGN_ARGS[$d]} "${extra[@]}"
					watch_usage watch "$pid" "$WORK/usage-designs"
					mem=$(ip netns exec "$NS_B" curl -fsS --max-time 5 http://127.0.0.1:9464/metrics | awk '$1 == "loupe_bpf_map_memory_bytes{map=\"all\"}" {printf "%.0f", $2}')
				fi
				s0=$(prog_stats "$NS_B" "$IF_B")
				# shellcheck disable=SC2086
				taskset -c 1 ip netns exec "$NS_A" tcpreplay -i "$IF_A" --preload-pcap ${WORKLOAD_REPLAY[$w]} "$WORK/$w.pcap" >"$WORK/replay.log" 2>&1
				s1=$(prog_stats "$NS_B" "$IF_B")
				if [[ $d == empty ]]; then
					stop_bg "$pid"
				else
					stop_agent "$pid"
					cpu=$(usage_of "$watch" "$WORK/usage-designs" | awk '{print $1}')
					if ((r == 1)); then
						acc=$("$BIN/loupe" flows --store "$store" --json | python3 "$BENCH_DIR/accuracy.py" "$WORK/$w.truth" "$IF_B" "${WORKLOAD_LOOPS[$w]}" | tr '\t' ',')
					fi
					rm -rf "$store"
				fi
				sent=$(awk '/Actual:/ {print $2}' "$WORK/replay.log")
				pps=$(awk '/Rated:/ {print $6}' "$WORK/replay.log")
				read -r c t < <(echo "$s0 $s1" | awk '{printf "%.0f %.0f\n", $3 - $1, $4 - $2}')
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$w" "$d" "$c" "$t" "$sent" "$pps" "$mem" "$cpu" "$acc" >>"$tsv"
				echo "bench: designs round $r, $w, $d: $(calc "$t / ($c + 0.000001)") ns/packet, $sent sent at $pps pps, memory $mem, cpu $cpu s, accuracy $acc" >&2
			done
		done
	done
	bpf_stats_restore
	del_pair

	section_begin designs "11. Exact table, sketch and off-path: the selective-measurement seed's Tables 1-3"
	say "The seed compared its designs at 160 kpps with 1 400 monitored hosts (2 550 flows): eBPF hash 344 ns a packet," \
		"on-path sketch (SMON) 848 ns, off-path ring buffer 182 ns; accuracy 100 %, > 99 %, 100 %; memory 396 KB, 97 KB, 2.1 MB." \
		"Here, in one run: a veth pair, tcpreplay pinned to CPU 1 into the A end, the program at B's ingress (TCX);" \
		"zipf traces from \`gentrace -kind zipf\` (a few heavy hitters, a long tail; the truth file holds every flow's packets and bytes)." \
		"ns/packet = Δrun_time_ns / Δrun_cnt of the ingress program (bpf_stats); memory = \`loupe_bpf_map_memory_bytes{map=\"all\"}\`" \
		"(every map, as the kernel accounts it); CPU = the agent's user+system seconds over the whole run (procstat);" \
		"accuracy from round 1's store, judged by \`bench/accuracy.py\` against the truth: flows exact (records hold their packets and bytes)," \
		"flows estimated and within their stated bound, flows no record names, packets in unattributed records, and how many of" \
		"the 100 heaviest flows are exact or within their bound. $rounds rounds, designs in alternation; medians over the rounds." "" \
		"Reading the accuracy columns: \"within bound\" counts the flows whose records, summed over every interval of the run, lie between" \
		"the truth and the truth plus their summed bounds. A flow whose packets in some interval went to the unattributed record (its estimate" \
		"did not fit what its interface had left, or it was not yet a candidate) sums below its truth and is not counted within." \
		"Off-path keeps each event's ring-buffer space until the interval's records are committed, so that a crash loses nothing it read:" \
		"its ring buffer must hold a whole interval of packets, 128 bytes each (8 MiB: 65 536), and loses what does not fit, counted as lost." "" \
		'```'
	for w in "${workloads[@]}"; do
		read -r flows packets <<<"${WORKLOAD_TRACE[$w]}"
		say "gentrace -kind zipf -flows $flows -packets $packets -seed 1 -truth $w.truth -out $w.pcap"
		say "taskset -c 1 ip netns exec $NS_A tcpreplay -i $IF_A --preload-pcap ${WORKLOAD_REPLAY[$w]} $w.pcap"
	done
	for d in exact sketch memory offpath; do
		say "ip netns exec $NS_B loupe run --iface $IF_B --store DIR --cache-active-timeout 2s ${DESIGN_ARGS[$d]}$([[ $d != exact ]] || echo " --flow-budget FLOWS")   # $d"
	done
	say '```' ""
	local m em ratio
	for w in "${workloads[@]}"; do
		read -r flows packets <<<"${WORKLOAD_TRACE[$w]}"
		say "**$w** ($flows flows, $(awk -F'\t' -v w="$w" '$2 == w {print $7}' "$tsv" | median | awk '{printf "%.0f", $1}') packets/s replayed):" "" \
			"| design | ns/packet (median) | × empty | kernel memory | agent CPU (s) | flows exact / estimated (within bound) / unnamed of all | packets unattributed / recorded / sent | top 100 exact or within bound |" \
			"| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"
		em=$(awk -F'\t' -v w="$w" '$2 == w && $3 == "empty" {print $5 / $4}' "$tsv" | median)
		for d in empty exact sketch memory offpath; do
			m=$(awk -F'\t' -v w="$w" -v d="$d" '$2 == w && $3 == d {print $5 / $4}' "$tsv" | median)
			ratio=$(calc "$m / $em")
			local memv cpuv a
			memv=$(awk -F'\t' -v w="$w" -v d="$d" '$2 == w && $3 == d && $8 != "-" {print $8}' "$tsv" | median)
			cpuv=$(awk -F'\t' -v w="$w" -v d="$d" '$2 == w && $3 == d && $9 != "-" {print $9}' "$tsv" | median)
			a=$(awk -F'\t' -v w="$w" -v d="$d" '$1 == 1 && $2 == w && $3 == d {print $10}' "$tsv")
			if [[ $d == empty ]]; then
				say "| empty program | $(fmt %.1f "$m") | 1.00 | – | – | – | – | – |"
			else
				IFS=, read -r fl ex es wi un se re ep ua top <<<"$a"
				say "| $d | $(fmt %.1f "$m") | $(fmt %.2f "$ratio") | $(awk -v b="$memv" 'BEGIN {printf "%.1f MiB", b / 1048576}') | $(fmt %.2f "$cpuv") | $ex / $es ($wi) / $un of $fl | $ua / $re / $se | $top |"
			fi
		done
		say ""
	done
	local ex10 em10 sk10
	if [[ " ${workloads[*]} " == *" 10x "* ]]; then
		em10=$(awk -F'\t' '$2 == "10x" && $3 == "empty" {print $5 / $4}' "$tsv" | median)
		ex10=$(awk -F'\t' '$2 == "10x" && $3 == "exact" {print $5 / $4}' "$tsv" | median)
		sk10=$(awk -F'\t' '$2 == "10x" && $3 == "sketch" {print $5 / $4}' "$tsv" | median)
		say "Targets (10x: 25 500 flows): the exact table at most 2.5× the empty program:" \
			"**$(awk -v a="$ex10" -v b="$em10" 'BEGIN {print (a <= 2.5 * b ? "met" : "not met")}')** ($(fmt %.2f "$(calc "$ex10 / $em10")")×);" \
			"the sketch no slower per packet than the exact table:" \
			"**$(awk -v a="$sk10" -v b="$ex10" 'BEGIN {print (a <= b ? "met" : "not met")}')** ($(fmt %.1f "$sk10") against $(fmt %.1f "$ex10") ns)."
	fi
	section_end
}
