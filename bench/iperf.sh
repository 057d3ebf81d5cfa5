# Benchmark 1: iperf3 TCP throughput over a veth pair between two network
# namespaces, in three configurations run in alternation (the seed thesis's
# Table 5.1):
#   untraced     nothing attached
#   qdisc-only   the empty TC program (datapath.LoadBaseline) at the ingress
#                and egress hooks of the receiving end (bench/cmd/hookbench)
#   traced       the agent (loupe run) on the receiving end, with its store
# Both ends are pinned to CPU 0 (-A 0,0): unpinned, iperf3 swings by 2x here.
# Sourced by bench/run.sh.

bench_iperf() {
	local rounds=${BENCH_IPERF_ROUNDS:-5} secs=${BENCH_IPERF_SECONDS:-10}
	local r cfg srv hook agent store c0 c1 gbps retr stored counted
	local tsv=$WORK/iperf.tsv
	new_pair
	local client=(ip netns exec "$NS_A" timeout $((secs + 30)) iperf3 -c 198.18.0.2 -t "$secs" -A 0,0 -J)
	local hookcmd=(ip netns exec "$NS_B" "$BIN/hookbench" attach -iface "$IF_B")

	start_bg srv TERM "$WORK/iperf3-server.log" ip netns exec "$NS_B" iperf3 -s -B 198.18.0.2 --forceflush
	wait_log "$WORK/iperf3-server.log" "Server listening" 10 "$srv"
	: >"$tsv"
	stored=0 counted=0
	for ((r = 1; r <= rounds; r++)); do
		for cfg in untraced qdisc-only traced; do
			# The interface counters are read outside the agent's
			# lifetime, so that every packet it could see is in them.
			c0=$(($(rx_packets "$NS_B" "$IF_B") + $(ip netns exec "$NS_B" cat "/sys/class/net/$IF_B/statistics/tx_packets")))
			case $cfg in
			qdisc-only)
				start_bg hook TERM "$WORK/hook.log" "${hookcmd[@]}"
				wait_log "$WORK/hook.log" '^attached' 10 "$hook"
				;;
			traced)
				store=$WORK/store-iperf-$r
				start_agent agent "$NS_B" "$WORK/agent-iperf-$r.log" --iface "$IF_B" --store "$store"
				;;
			esac
			"${client[@]}" >"$WORK/iperf-$r-$cfg.json"
			case $cfg in
			qdisc-only) stop_bg "$hook" ;;
			traced) stop_agent "$agent" ;;
			esac
			c1=$(($(rx_packets "$NS_B" "$IF_B") + $(ip netns exec "$NS_B" cat "/sys/class/net/$IF_B/statistics/tx_packets")))
			read -r gbps retr < <(python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["end"]
print(e["sum_received"]["bits_per_second"] / 1e9, e["sum_sent"].get("retransmits", 0))' "$WORK/iperf-$r-$cfg.json")
			if [[ $cfg == traced ]]; then
				stored=$((stored + $(store_packets "$store" "$IF_B")))
				counted=$((counted + c1 - c0))
			fi
			printf '%s\t%s\t%s\t%s\n' "$r" "$cfg" "$gbps" "$retr" >>"$tsv"
			echo "bench: iperf round $r $cfg: $(fmt %.2f "$gbps") Gbit/s, $retr retransmits" >&2
		done
	done
	stop_bg "$srv"
	del_pair

	section_begin iperf "1. iperf3 TCP throughput: untraced, qdisc-only, traced"
	say "A veth pair between two network namespaces; iperf3 client in A, server in B, both pinned to CPU 0." \
		"$rounds rounds × 3 configurations × $secs s, in alternation (untraced, qdisc-only, traced in each round)." \
		"qdisc-only attaches the empty TC program (\`datapath.LoadBaseline\`) with TCX at ingress and egress of B's veth;" \
		"traced runs the agent in B (every interface of B but lo, i.e. B's veth, ingress and egress, store on)." \
		"TSO/GSO are on, so TCP crosses the hooks as super-packets: this measures throughput, not per-packet cost." \
		"" \
		'```' \
		"ip netns exec $NS_B iperf3 -s -B 198.18.0.2 --forceflush" \
		"${client[*]}" \
		"# qdisc-only, during the client run:" \
		"${hookcmd[*]/#$BIN\//}" \
		"# traced, during the client run:" \
		"ip netns exec $NS_B loupe run --iface $IF_B --store DIR   # a new DIR each run" \
		'```' \
		"" \
		"| configuration | runs (Gbit/s) | mean (Gbit/s) | stdev | % of untraced (ratio of the means) | per-round ratio to untraced (mean ± sd) | retransmits |" \
		"| --- | --- | ---: | ---: | ---: | ---: | ---: |"
	local base m sd runs rt pct pm psd
	read -r base _ < <(awk -F'\t' '$2 == "untraced" {print $3}' "$tsv" | mean_sd)
	for cfg in untraced qdisc-only traced; do
		read -r m sd < <(awk -F'\t' -v c="$cfg" '$2 == c {print $3}' "$tsv" | mean_sd)
		runs=$(awk -F'\t' -v c="$cfg" '$2 == c {printf "%s%.2f", (n++ ? ", " : ""), $3}' "$tsv")
		rt=$(awk -F'\t' -v c="$cfg" '$2 == c {s += $4} END {printf "%.0f", s}' "$tsv")
		pct=$(calc "100 * $m / $base")
		# Paired by round: each run against the untraced run of its round,
		# which takes slow drifts of the machine out of the comparison.
		read -r pm psd < <(awk -F'\t' -v c="$cfg" '$2 == "untraced" {u[$1] = $3} $2 == c {x[$1] = $3}
			END {for (r in x) print 100 * x[r] / u[r]}' "$tsv" | mean_sd)
		say "| $cfg | $runs | $(fmt %.2f "$m") | $(fmt %.2f "$sd") | $(fmt %.1f "$pct") % | $(fmt %.1f "$pm") ± $(fmt %.1f "$psd") % | $rt |"
		[[ $cfg == traced ]] && TRACED_PCT=$pct
	done
	say "" \
		"Target: traced ≥ 97 % of untraced: **$(awk -v p="$TRACED_PCT" 'BEGIN {print (p >= 97 ? "met" : "not met")}')** ($(fmt %.1f "$TRACED_PCT") %)." \
		"" \
		"Exactness check over the traced runs: the agent stored $stored packets for B's veth; the interface counted $counted (rx + tx)$([[ $stored == "$counted" ]] && echo ", equal" || echo ": **they differ**")."
	section_end
}
