# Benchmark 10: what the parse's tunnel step costs. BenchmarkTunnels in
# internal/datapath runs the flows-only entry program through
# BPF_PROG_TEST_RUN on packets that are not tunnelled (TCP, UDP to a port
# outside the tunnel ports' range and to one inside it, TCP over IPv6: what
# must not get slower) and on one packet of each encapsulation. The same
# benchmark, built against BENCH_TUNNELS_BASE (the commit before the tunnel
# step, whose datapath counts the tunnel frames by their outer headers),
# runs beside it, the two builds alternating in every round; medians over
# the rounds. BenchmarkTunnelsFirstPacket times the first packet of a new
# flow (plain UDP, and VXLAN, whose flow also gets its tunnel table entry),
# and TestProgramSizes gives each build's instruction counts.
# Knobs: BENCH_TUNNELS_ROUNDS (5), BENCH_TUNNELS_RUNS (300000 runs a case),
# BENCH_TUNNELS_BASE (f110b54). Sourced by bench/run.sh.

bench_tunnels() {
	local rounds=${BENCH_TUNNELS_ROUNDS:-5} runs=${BENCH_TUNNELS_RUNS:-300000} base=${BENCH_TUNNELS_BASE:-f110b54}
	local r b tsv=$WORK/tunnels.tsv sizes=$WORK/sizes.tsv tree=$WORK/base-tree
	(cd "$ROOT" && go test -c -o "$WORK/now.test" ./internal/datapath)
	# The base with this benchmark's two files dropped in (they use only
	# test helpers the base has).
	mkdir -p "$tree"
	git -C "$ROOT" archive "$base" | tar -x -C "$tree"
	cp "$ROOT"/internal/datapath/tunnel_bench_test.go "$ROOT"/internal/datapath/tunnel_frames_test.go "$tree/internal/datapath/"
	(cd "$tree" && go test -c -o "$WORK/base.test" ./internal/datapath)
	base=$(git -C "$ROOT" rev-parse --short "$base")
	: >"$tsv"
	for ((r = 1; r <= rounds; r++)); do
		for b in base now; do
			"$WORK/$b.test" -test.run '^$' -test.bench '^BenchmarkTunnels$' -test.benchtime "${runs}x" |
				awk -v r="$r" -v b="$b" '/^BenchmarkTunnels\// {n = $1; sub(/^BenchmarkTunnels\//, "", n); sub(/-[0-9]+$/, "", n); print r "\t" b "\t" n "\t" $(NF-1)}' >>"$tsv"
			"$WORK/$b.test" -test.run '^$' -test.bench '^BenchmarkTunnelsFirstPacket$' -test.benchtime 4096x |
				awk -v r="$r" -v b="$b" '/^BenchmarkTunnelsFirstPacket\// {n = $1; sub(/^BenchmarkTunnelsFirstPacket\//, "", n); sub(/-[0-9]+$/, "", n); print r "\t" b "\tfirst-" n "\t" $(NF-1)}' >>"$tsv"
		done
		echo "bench: tunnels round $r: $(awk -F'\t' -v r="$r" '$1 == r {printf "%s/%s %s ns  ", $2, $3, $4}' "$tsv")" >&2
	done
	: >"$sizes"
	for b in base now; do
		"$WORK/$b.test" -test.run '^TestProgramSizes$' -test.v |
			awk -v b="$b" '/instructions,/ {print b "\t" $2 "\t" $3 "\t" $4 "\t" $6}' >>"$sizes"
	done

	section_begin tunnels "12. Tunnels: what the parse's tunnel step costs"
	say "BPF_PROG_TEST_RUN of the flows-only entry program (\`go test -bench Tunnels ./internal/datapath\`, $runs runs a case," \
		"$rounds rounds, medians), this build against $base (the commit before the tunnel step, built with the same two benchmark" \
		"files; it counts the tunnel frames by their outer headers), the two alternating in every round. tcp, udp-53, udp-5353" \
		"(inside the tunnel ports' range 4789..8472) and tcp-v6 are not tunnelled: they must not get slower. vxlan, geneve," \
		"gre-key and ipip carry a 64-byte UDP datagram. first-udp and first-vxlan are the first packet of a new flow (one run" \
		"per syscall, median over 4096 flows): the flow table's insert, and for VXLAN the tunnel table's." \
		"A test run pays no hook dispatch and finds its caches warm: compare the rows with one another, not with section 2." "" \
		'```' "go test -c -o now.test ./internal/datapath    # and base.test, from $base with tunnel_{bench,frames}_test.go" \
		"./now.test -test.run '^\$' -test.bench '^BenchmarkTunnels\$' -test.benchtime ${runs}x" \
		"./now.test -test.run '^\$' -test.bench '^BenchmarkTunnelsFirstPacket\$' -test.benchtime 4096x" '```' "" \
		"| case | $base runs (ns/packet) | median | now runs (ns/packet) | median | now − $base |" \
		"| --- | --- | ---: | --- | ---: | ---: |"
	local c vb vn spread worst="" slower=()
	runs_of() { awk -F'\t' -v b="$1" -v c="$2" '$2 == b && $3 == c {printf "%s%s", (n++ ? ", " : ""), $4}' "$tsv"; }
	for c in tcp udp-53 udp-5353 tcp-v6 vxlan geneve gre-key ipip first-udp first-vxlan; do
		vb=$(awk -F'\t' -v c="$c" '$2 == "base" && $3 == c {print $4}' "$tsv" | median)
		vn=$(awk -F'\t' -v c="$c" '$2 == "now" && $3 == c {print $4}' "$tsv" | median)
		say "| $c | $(runs_of base "$c") | $vb | $(runs_of now "$c") | $vn | $(awk -v a="$vn" -v b="$vb" 'BEGIN {printf "%+.0f ns", a - b}') |"
		case $c in
		tcp | udp-53 | udp-5353 | tcp-v6)
			# Slower only beyond the larger spread of the two builds'
			# rounds (max - min).
			spread=$(awk -F'\t' -v c="$c" '$3 == c {if (!(($2) in lo) || $4 < lo[$2]) lo[$2] = $4; if ($4 > hi[$2]) hi[$2] = $4}
				END {s = 0; for (b in lo) if (hi[b] - lo[b] > s) s = hi[b] - lo[b]; print s}' "$tsv")
			if awk -v a="$vn" -v b="$vb" -v s="$spread" 'BEGIN {exit !(a - b > s)}'; then
				slower+=("$c ($(awk -v a="$vn" -v b="$vb" 'BEGIN {printf "%+.0f", a - b}') ns, spread $spread ns)")
			fi
			;;
		esac
	done
	if ((${#slower[@]})); then
		worst="**not met**: slower beyond the spread of the rounds: ${slower[*]}"
	else
		worst="**met**: no case is slower by more than the spread of its rounds"
	fi
	say "" "Target: flows-only on traffic that is not tunnelled no slower than at $base: $worst." "" \
		"Instructions of the entry programs as loaded (\`TestProgramSizes\`: xlated, after the verifier removed what the" \
		"capability switches make dead; the tunnel step's global functions included) and instructions the verifier processed:" "" \
		"| build | program | $base instructions | verified | now instructions | verified |" "| --- | --- | ---: | ---: | ---: | ---: |"
	awk -F'\t' '{k = $2 "\t" $3; if (!(k in seen)) {seen[k] = 1; order[++n] = k} v[$1, k] = $4 "\t" $5}
		END {for (i = 1; i <= n; i++) {k = order[i]; split(k, kk, "\t"); split(v["base", k], b, "\t"); split(v["now", k], w, "\t");
			printf "| %s | %s | %s | %s | %s | %s |\n", kk[1], kk[2], b[1], b[2], w[1], w[2]}}' "$sizes" >>"$SECTION"
	section_end
}
