# Benchmark 4: per-CPU versus shared flow tables (--map-type percpu|shared),
# on 1 flow and on 10 000 flows sent from one CPU, and on 1 flow sent from
# both CPUs at once (where a shared table's counters bounce between CPUs):
#   - packets per second delivered through a veth under a flood
#     (bench/cmd/flood, 64-byte UDP frames, qdisc bypassed, pinned to one
#     CPU: the receiving veth's softirq and its TC hook run on that CPU, so
#     the hook's cost comes straight off the rate), bpf_stats off;
#   - BPF ns per packet (bpf_stats on, a second, shorter flood);
#   - kernel memory of the flow tables for 100 000 flows (datapath.Load).
# "none" (no program) and "empty" (datapath.LoadBaseline) are the
# references. Sourced by bench/run.sh.

LOADS=(1 10000 1x2)
declare -A LOAD_LABEL=([1]="1 flow, 1 CPU" [10000]="10 000 flows, 1 CPU" [1x2]="1 flow, 2 CPUs")

# flood_load LOAD SECS: flood IF_A for SECS seconds with LOAD: "1" or
# "10000" flows from CPU 1, or "1x2", the same single flow from CPU 0 and
# CPU 1 at once. Prints the longest flood's duration in seconds.
flood_load() {
	local load=$1 secs=$2 flows=$1 cpus=(1) cpu p i pids=()
	if [[ $load == 1x2 ]]; then
		flows=1 cpus=(0 1)
	fi
	for cpu in "${cpus[@]}"; do
		start_bg p TERM "$WORK/flood-$cpu.log" taskset -c "$cpu" ip netns exec "$NS_A" "$BIN/flood" -iface "$IF_A" -size 64 -flows "$flows" -duration "${secs}s"
		pids+=("$p")
	done
	for p in "${pids[@]}"; do
		for ((i = 0; i < (secs + 10) * 10; i++)); do
			alive "$p" || break
			sleep 0.1
		done
		stop_bg "$p" 5
	done
	for cpu in "${cpus[@]}"; do
		awk '{print $5}' "$WORK/flood-$cpu.log"
	done | sort -n | tail -1
}

bench_tables() {
	local rounds=${BENCH_ROUNDS:-3} secs=5 nsecs=2 r load cfg pid store rx0 rx1 el c t s0 s1 ns pps
	local tsv=$WORK/tables.tsv
	new_pair
	bpf_stats_enable # remembers the previous value for the EXIT trap
	bpf_stats_disable
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		for load in "${LOADS[@]}"; do
			for cfg in none empty percpu shared; do
				store=$WORK/store-tables-$r-$load-$cfg
				case $cfg in
				none) pid="" ;;
				empty)
					start_bg pid TERM "$WORK/hook.log" ip netns exec "$NS_B" "$BIN/hookbench" attach -iface "$IF_B"
					wait_log "$WORK/hook.log" '^attached' 10 "$pid"
					;;
				*) start_agent pid "$NS_B" "$WORK/agent-tables.log" --iface "$IF_B" --store "$store" --map-type "$cfg" ;;
				esac
				rx0=$(rx_packets "$NS_B" "$IF_B")
				el=$(flood_load "$load" "$secs")
				rx1=$(rx_packets "$NS_B" "$IF_B")
				pps=$(calc "($rx1 - $rx0) / $el")
				ns=-
				if [[ $cfg != none ]]; then
					bpf_stats_enable
					s0=$(prog_stats "$NS_B" "$IF_B")
					flood_load "$load" "$nsecs" >/dev/null
					s1=$(prog_stats "$NS_B" "$IF_B")
					bpf_stats_disable
					read -r c t < <(echo "$s0 $s1" | awk '{printf "%.0f %.0f\n", $3 - $1, $4 - $2}')
					ns=$(calc "$t / $c")
				fi
				case $cfg in
				none) ;;
				empty) stop_bg "$pid" ;;
				*) stop_agent "$pid" ;;
				esac
				printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$load" "$cfg" "$pps" "$ns" >>"$tsv"
				echo "bench: tables round $r, ${LOAD_LABEL[$load]}, $cfg: $(fmt %.0f "$pps") pps delivered, $ns ns/packet" >&2
			done
		done
	done
	bpf_stats_restore
	local memcmd=(ip netns exec "$NS_B" "$BIN/hookbench" mem -budget 100000)
	"${memcmd[@]}" >"$WORK/mem.txt"
	del_pair

	section_begin tables "4. Per-CPU versus shared flow tables"
	say "A flooder (\`bench/cmd/flood\`: AF_PACKET, qdisc bypassed, sendmmsg of 64 frames) sends 64-byte UDP/IPv4 frames into the A end" \
		"of a veth pair for $secs s: 1 flow or 10 000 flows (by source port) from CPU 1, or 1 flow from CPU 0 and CPU 1 at once (two flooders)." \
		"The veth delivers each frame to the B end in the softirq of the sending CPU, where the program runs at B's ingress hook" \
		"(the agent runs in namespace B), so the program's cost comes straight off the rate. Delivered pps = B's rx_packets delta /" \
		"flood time, with bpf_stats off. Then, with bpf_stats on, a ${nsecs} s flood of the same load gives the BPF ns/packet of the ingress" \
		"program. $rounds rounds, all configurations in alternation; mean ± sample stdev. none = no program, empty = the empty program." \
		"" \
		'```' \
		"ip netns exec $NS_B loupe run --iface $IF_B --store DIR --map-type percpu|shared" \
		"taskset -c 1 ip netns exec $NS_A flood -iface $IF_A -size 64 -flows 1|10000 -duration ${secs}s   # and -duration ${nsecs}s with kernel.bpf_stats_enabled=1" \
		"taskset -c 0 ip netns exec $NS_A flood -iface $IF_A -size 64 -flows 1 -duration ${secs}s & taskset -c 1 ...   # 1 flow, 2 CPUs" \
		"${memcmd[*]/#$BIN\//}" \
		'```' \
		"" \
		"| tables | load | delivered pps (mean ± sd) | % of no program | BPF ns/packet (mean ± sd) |" \
		"| --- | --- | ---: | ---: | ---: |"
	local m sd nm nsd base
	declare -A PPS NS
	for load in "${LOADS[@]}"; do
		read -r base _ < <(awk -F'\t' -v l="$load" '$2 == l && $3 == "none" {print $4}' "$tsv" | mean_sd)
		for cfg in none empty percpu shared; do
			read -r m sd < <(awk -F'\t' -v l="$load" -v c="$cfg" '$2 == l && $3 == c {print $4}' "$tsv" | mean_sd)
			PPS[$cfg-$load]=$m
			if [[ $cfg == none ]]; then
				nm="–"
			else
				read -r nm nsd < <(awk -F'\t' -v l="$load" -v c="$cfg" '$2 == l && $3 == c {print $5}' "$tsv" | mean_sd)
				NS[$cfg-$load]=$nm
				nm="$(fmt %.1f "$nm") ± $(fmt %.1f "$nsd")"
			fi
			say "| $cfg | ${LOAD_LABEL[$load]} | $(fmt %.0f "$m") ± $(fmt %.0f "$sd") | $(fmt %.1f "$(calc "100 * $m / $base")") % | $nm |"
		done
	done
	local kind tb tot cpus
	say "" \
		"Kernel memory of the flow tables with a budget of 100 000 flows, per CPU for per-CPU tables (\`datapath.Load\`, \`MemoryBytes\`: the kernel's memlock" \
		"accounting; the datapath has two tables, the active one and the standby one it swaps in at each eviction):" \
		"" \
		"| tables | both flow tables (bytes) | one table of 100 000 flows (MB) | per flow (bytes) | all maps (bytes) | CPUs |" \
		"| --- | ---: | ---: | ---: | ---: | ---: |"
	declare -A MEM
	while read -r kind tb tot cpus; do
		MEM[$kind]=$tb
		say "| $kind | $tb | $(fmt %.2f "$(calc "$tb / 2 / 1e6")") | $(fmt %.0f "$(calc "$tb / 2 / 100000")") | $tot | $cpus |"
	done <"$WORK/mem.txt"
	say "" "Per-CPU against shared, from the tables above:" ""
	for load in "${LOADS[@]}"; do
		say "- ${LOAD_LABEL[$load]}: per-CPU $(fmt %.0f "${PPS[percpu-$load]}") pps vs shared $(fmt %.0f "${PPS[shared-$load]}") pps" \
			"  ($(fmt %+.1f "$(calc "100 * (${PPS[percpu-$load]} / ${PPS[shared-$load]} - 1)")") % for per-CPU); BPF time" \
			"  $(fmt %.1f "${NS[percpu-$load]}") ns vs $(fmt %.1f "${NS[shared-$load]}") ns per packet ($(fmt %+.1f "$(calc "${NS[percpu-$load]} - ${NS[shared-$load]}")") ns for per-CPU)."
	done
	say "- Memory: per-CPU tables take $(fmt %.2f "$(calc "${MEM[percpu]} / ${MEM[shared]}")") × the kernel memory of shared ones on this $(nproc)-CPU machine" \
		"  (a per-CPU budget of 100 000 flows on each CPU: every CPU has twice that in 128-byte slots, so the memory grows with the CPUs)."
	section_end
}
