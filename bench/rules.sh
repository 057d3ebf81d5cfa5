# Benchmark 9: what measurement rules cost per packet (the selective
# measurement issue's target: at most +20 ns at 10 000 rules over no rules;
# a skipped packet cheaper than a measured one). BenchmarkRules in
# internal/datapath runs the real entry program on one TCP packet through
# BPF_PROG_TEST_RUN: the flows-only build, then the build with rules
# holding 0, 10 and 10 000 rules (a /24 destination each, the packet's among
# them), measured or skipped, and a packet no rule matches. The packet is
# one flow's, so that its verdict comes from the verdict cache after the
# first run; the nocache rows judge every packet (datapath.Options
# JudgeEveryPacket), as a flow's first packet is. Rounds of the whole
# benchmark alternate; medians over the rounds.
# BENCH_RULES_BASE names an earlier commit (default f110b54, the last
# one before the verdict cache; empty: not compared) whose BenchmarkRules
# runs in the same rounds, alternating with this tree's, so that the
# before and after columns share the machine's state; its cases are those
# it has.
# Knobs: BENCH_RULES_ROUNDS (5), BENCH_RULES_RUNS (300000 runs a case),
# BENCH_RULES_BASE.
# Sourced by bench/run.sh.

# rules_over prints, for each round of the table file, case c's ns/packet
# less rules-0's in the same round: a burst of load from others on the
# machine raises a whole round, which the difference cancels, where a
# difference of medians would mix rounds.
rules_over() {
	awk -F'\t' -v c="$1" '$2 == "rules-0" {b[$1] = $3} $2 == c {v[$1] = $3}
		END {for (r in v) if (r in b) print v[r] - b[r]}' "$2"
}

# rules_cases runs one BenchmarkRules binary and appends its results to
# the table file as round, case, ns/packet.
rules_cases() {
	local bin=$1 r=$2 runs=$3 out=$4
	"$bin" -test.run '^$' -test.bench '^BenchmarkRules$' -test.benchtime "${runs}x" |
		awk -v r="$r" '/^BenchmarkRules\// {n = $1; sub(/^BenchmarkRules\//, "", n); sub(/-[0-9]+$/, "", n); print r "\t" n "\t" $(NF-1)}' >>"$out"
}

bench_rules() {
	local rounds=${BENCH_RULES_ROUNDS:-5} runs=${BENCH_RULES_RUNS:-300000} r tsv=$WORK/rules.tsv btsv=$WORK/rules-base.tsv
	local base_rev=${BENCH_RULES_BASE-f110b54}
	(cd "$ROOT" && go test -c -o "$WORK/datapath.test" ./internal/datapath)
	: >"$tsv"
	: >"$btsv"
	if [[ -n $base_rev ]]; then
		# An export of the commit, not a worktree: nothing is added to
		# the repository's metadata, and nothing is left if this stops.
		mkdir "$WORK/base"
		(cd "$ROOT" && git archive "$base_rev") | tar -x -C "$WORK/base"
		(cd "$WORK/base" && go test -c -o "$WORK/datapath-base.test" ./internal/datapath)
		base_rev=$(cd "$ROOT" && git rev-parse --short "$base_rev")
	fi
	for ((r = 1; r <= rounds; r++)); do
		# Which goes first alternates, so that neither always runs on
		# the warmer machine.
		if [[ -n $base_rev ]] && ((r % 2)); then
			rules_cases "$WORK/datapath-base.test" "$r" "$runs" "$btsv"
		fi
		rules_cases "$WORK/datapath.test" "$r" "$runs" "$tsv"
		if [[ -n $base_rev ]] && ((r % 2 == 0)); then
			rules_cases "$WORK/datapath-base.test" "$r" "$runs" "$btsv"
		fi
		echo "bench: rules round $r: $(awk -F'\t' -v r="$r" '$1 == r {printf "%s %s ns  ", $2, $3}' "$tsv")" >&2
		[[ -z $base_rev ]] || echo "bench: rules round $r at $base_rev: $(awk -F'\t' -v r="$r" '$1 == r {printf "%s %s ns  ", $2, $3}' "$btsv")" >&2
	done
	section_begin rules "9. Measurement rules: BPF ns per packet"
	say "BPF_PROG_TEST_RUN of the entry program on a 100-byte TCP packet to 10.0.5.9 (\`go test -bench Rules ./internal/datapath\`," \
		"$runs runs a case, $rounds rounds, medians): the flows-only build, then the build with rules with 0, 10 or 10 000 rules" \
		"\`dst=10.X.Y.0/24 proto=tcp ACTION\`, the packet's /24 among them; \"no match\" sends to 172.16.5.9, which no rule covers;" \
		"\"noprefix\" is the one rule \`proto=tcp measure\`, judged without a trie lookup (the rule's own work, apart from the trie's)." \
		"Every run repeats one flow, so that after the first the flow's verdict comes from the verdict cache (bpf/rules/rules.h);" \
		"the \"nocache\" rows judge every packet (tries and candidates), as a flow's first packet is judged." \
		"A test run pays no hook dispatch and finds its caches warm: compare the rows with one another, not with section 2."
	[[ -z $base_rev ]] || say "The \"before\" columns are commit $base_rev (no verdict cache), built from \`git archive\` and run in the same rounds," \
		"alternating first and second with this tree's."
	say "\"Over rules-0\" is the median over the rounds of the case's time less rules-0's in the same round."
	local head="| case | runs (ns/packet) | median (ns/packet) | over rules-0 |" rule="| --- | --- | ---: | ---: |"
	[[ -z $base_rev ]] || { head="$head before: median | before: over rules-0 |"; rule="$rule ---: | ---: |"; }
	say "" '```' "go test -c -o datapath.test ./internal/datapath" \
		"./datapath.test -test.run '^\$' -test.bench '^BenchmarkRules\$' -test.benchtime ${runs}x" '```' "" "$head" "$rule"
	local c v bv row
	for c in flows-only rules-0 rules-1-noprefix-measure rules-10-measure rules-10000-measure rules-10000-skip rules-10000-no-match \
		rules-10000-measure-nocache rules-10000-skip-nocache; do
		v=$(awk -F'\t' -v c="$c" '$2 == c {print $3}' "$tsv" | median)
		row="| $c | $(awk -F'\t' -v c="$c" '$2 == c {printf "%s%s", (n++ ? ", " : ""), $3}' "$tsv") | $v | $(rules_over "$c" "$tsv" | median | awk '{printf "%+.0f ns", $1}') |"
		if [[ -n $base_rev ]]; then
			bv=$(awk -F'\t' -v c="$c" '$2 == c {print $3}' "$btsv" | median)
			if [[ $bv == nan ]]; then
				row="$row – | – |"
			else
				row="$row $bv | $(rules_over "$c" "$btsv" | median | awk '{printf "%+.0f ns", $1}') |"
			fi
		fi
		say "$row"
	done
	local m10k skip over
	m10k=$(awk -F'\t' '$2 == "rules-10000-measure" {print $3}' "$tsv" | median)
	skip=$(awk -F'\t' '$2 == "rules-10000-skip" {print $3}' "$tsv" | median)
	over=$(rules_over rules-10000-measure "$tsv" | median)
	say "" "Targets: 10 000 rules at most +20 ns over no rules: **$(awk -v o="$over" 'BEGIN {print (o <= 20 ? "met" : "not met")}')**" \
		"($(awk -v o="$over" 'BEGIN {printf "%+.0f", o}') ns); a skipped packet cheaper than a measured one:" \
		"**$(awk -v s="$skip" -v m="$m10k" 'BEGIN {print (s < m ? "met" : "not met")}')** ($skip against $m10k ns)."
	if [[ -n $base_rev ]]; then
		say "At $base_rev in the same rounds: 10 000 rules $(rules_over rules-10000-measure "$btsv" | median | awk '{printf "%+.0f", $1}') ns over its no rule."
	fi
	section_end
}
